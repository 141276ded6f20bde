package hostnetmgr

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// NMMarkSuffix names the file the underlay unit leaves beside a NIC's
// journal (<journal dir>/<nic>.networkmanager) while NetworkManager is
// kept away from a NIC it managed: whoever gives the NIC back (a stop,
// `ovnhost cleanup`) hands it back to NetworkManager.
const NMMarkSuffix = ".networkmanager"

// Bridged is a NIC whose configuration an underlay network moved to its
// bridge.
type Bridged struct {
	NIC, Bridge string
	// NetworkManager: NetworkManager managed the NIC before (the mark).
	NetworkManager bool
}

// BridgedNICs reads the NICs the underlay unit has moved from the journals
// in dir (supervisor/hostlink writes <dir>/<nic>.json with From and To,
// kept while the NIC is bridged). No directory: none.
func BridgedNICs(dir string) ([]Bridged, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Bridged
	for _, e := range entries {
		nic, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || e.IsDir() || strings.HasPrefix(nic, ".") {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		var j struct{ From, To string }
		if err := json.Unmarshal(raw, &j); err != nil || j.From != nic || j.To == "" {
			continue
		}
		_, err = os.Stat(filepath.Join(dir, nic+NMMarkSuffix))
		out = append(out, Bridged{NIC: nic, Bridge: j.To, NetworkManager: err == nil})
	}
	sort.Slice(out, func(i, k int) bool { return out[i].NIC < out[k].NIC })
	return out, nil
}
