package nldump

import (
	"errors"
	"testing"

	"github.com/vishvananda/netlink"
)

func TestRetryReturnsTheFirstCompleteDump(t *testing.T) {
	calls := 0
	got, err := Retry(func() ([]int, error) {
		calls++
		if calls < 3 {
			return []int{1}, netlink.ErrDumpInterrupted
		}
		return []int{1, 2}, nil
	})
	if err != nil || len(got) != 2 || calls != 3 {
		t.Fatalf("got %v, %v after %d calls; want [1 2] after 3", got, err, calls)
	}
}

func TestRetryGivesUpAndSaysSo(t *testing.T) {
	calls := 0
	_, err := Retry(func() ([]int, error) { calls++; return nil, netlink.ErrDumpInterrupted })
	if !errors.Is(err, netlink.ErrDumpInterrupted) || calls != attempts {
		t.Fatalf("err %v after %d calls; want ErrDumpInterrupted after %d", err, calls, attempts)
	}
	other := errors.New("permission denied")
	calls = 0
	if _, err := Retry(func() ([]int, error) { calls++; return nil, other }); err != other || calls != 1 {
		t.Fatalf("another error: %v after %d calls; want it at once", err, calls)
	}
}
