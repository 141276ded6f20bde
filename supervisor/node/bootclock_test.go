package node

import "testing"

func TestSinceBootIsTheMonotonicClock(t *testing.T) {
	a, err := sinceBoot()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := sinceBoot()
	if a <= 0 || b < a {
		t.Errorf("sinceBoot went %v then %v; want positive and not decreasing", a, b)
	}
}
