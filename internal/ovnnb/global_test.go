package ovnnb_test

import (
	"context"
	"testing"

	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnb/nbtest"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// SetGlobalOption sets its key and keeps the others.
func TestSetGlobalOptionKeepsTheOtherKeys(t *testing.T) {
	bothServers(t, func(t *testing.T, s *nbtest.Server, nb *ovnnb.Client) {
		ctx := context.Background()
		before := nbtest.Rows[*nbdb.NBGlobal](t, s, nb, nbdb.NBGlobalTable)[0].Options
		for _, v := range []string{"true", "false"} {
			if err := nb.SetGlobalOption(ctx, "use_ct_inv_match", v); err != nil {
				t.Fatal(err)
			}
		}
		rows := nbtest.Rows[*nbdb.NBGlobal](t, s, nb, nbdb.NBGlobalTable)
		if len(rows) != 1 || rows[0].Options["use_ct_inv_match"] != "false" {
			t.Fatalf("NB_Global %+v", rows)
		}
		for k, v := range before {
			if k != "use_ct_inv_match" && rows[0].Options[k] != v {
				t.Errorf("option %s was %q, now %q", k, v, rows[0].Options[k])
			}
		}
	})
}
