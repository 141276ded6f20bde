package hostlink

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var errInjected = errors.New("injected fault")

var moveOpts = Options{CopyMAC: true}

// failAt makes the nth (from 1) step of kind fail.
func failAt(t *testing.T, kind string, nth int) {
	seen := 0
	fault = func(step string) error {
		if step == kind {
			seen++
			if seen == nth {
				return errInjected
			}
		}
		return nil
	}
	t.Cleanup(func() { fault = nil })
}

// stepsOf lists the steps a successful move takes on a fresh host, as
// fault sees them.
func stepsOf(t *testing.T, opts func(*testing.T) Options) []string {
	t.Helper()
	var steps []string
	inFreshNetNS(t, func() {
		setupHost(t)
		fault = func(step string) error { steps = append(steps, step); return nil }
		defer func() { fault = nil }()
		if _, err := Move(nic, port, opts(t)); err != nil {
			t.Fatalf("Move: %v", err)
		}
	})
	return steps
}

func TestMoveAndBack(t *testing.T) {
	inFreshNetNS(t, func() {
		setupHost(t)
		// br-phy up from the start: its link-local address and routes
		// are then the same before and after.
		run(t, "ip link set "+port+" up")
		settle(t, port)
		before := snapshot(t)

		res, err := Move(nic, port, moveOpts)
		if err != nil {
			t.Fatalf("Move(%s, %s): %v", nic, port, err)
		}
		if want := (Result{Addrs: 8, Routes: 12, Rules: 4, Neighs: 2}); res != want {
			t.Errorf("Move(%s, %s) = %+v, want %+v", nic, port, res, want)
		}
		moved := snapshot(t)
		t.Logf("after the move:\n%s", moved)
		for _, want := range []string{
			port + "@" + port + "-peer: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9000 ",
			"link/ether 02:00:00:00:00:01 ",
			"inet 10.99.0.2/24 brd 10.99.0.255 scope global " + port + "\n",
			"inet 10.99.0.3/24 brd 10.99.0.255 scope global secondary " + port + "\n",
			"inet 10.99.1.2/24 scope global noprefixroute " + port + "\n",
			"inet 192.0.2.10/32 scope global dynamic " + port + ":dhcp\n       valid_lft Nsec preferred_lft Nsec",
			"inet6 2001:db8:98::5/64 scope global dynamic \n       valid_lft Nsec preferred_lft Nsec",
			"inet6 2001:db8:99::3/64 scope global nodad \n",
			"default via 10.99.0.1 dev " + port + " proto static \n",
			"default via 10.99.0.1 dev " + port + " table 100 \n",
			"10.99.5.0/24 via 10.99.0.254 dev " + port + " table 100 src 10.99.0.2 metric 50 \n",
			"10.99.1.0/24 dev " + port + " proto kernel scope link src 10.99.1.2 metric 100 \n",
			"198.51.100.0/24 via 10.99.0.254 dev " + port + " proto static metric 20 mtu 1400 \n",
			"10.99.7.0/24 via inet6 fe80::1 dev " + port + " proto static \n",
			"192.0.2.128/25 proto static \n\tnexthop via 10.99.0.1 dev " + port + " weight 2 \n\tnexthop via 10.98.0.1 dev " + side + " weight 1 \n",
			"2001:db8:2::/64 dev " + port + " src 2001:db8:99::2 metric 1024 pref medium\n",
			"2001:db8:3::/64 via 2001:db8:99::1 dev " + port + " table 100 metric 1024 pref medium\n",
			"default via fe80::1 dev " + port + " proto static metric 1024 pref medium\n",
			"100:\tfrom all iif " + port + " lookup 100\n",
			"101:\tfrom all oif " + port + " lookup 100\n",
			"102:\tfrom all iif " + port + " blackhole\n",
			"10.99.0.77 dev " + port + " lladdr 02:00:00:00:00:77 PERMANENT \n",
			"2001:db8:99::77 dev " + port + " lladdr 02:00:00:00:00:78 router PERMANENT \n",
		} {
			if !strings.Contains(moved, want) {
				t.Errorf("after the move, %q is missing", want)
			}
		}
		for _, line := range strings.Split(moved, "\n") {
			if strings.Contains(line, nic+" ") && (strings.Contains(line, "scope global") || strings.Contains(line, "PERMANENT") ||
				strings.Contains(line, "iif "+nic) || strings.Contains(line, "oif "+nic)) {
				t.Errorf("after the move, %s still has: %s", nic, line)
			}
		}

		// Everything moved already: nothing to do.
		if res, err := Move(nic, port, moveOpts); err != nil || !res.Empty() {
			t.Errorf("second Move = %+v, %v; want nothing moved, no error", res, err)
		}
		if again := snapshot(t); again != moved {
			t.Errorf("a second Move changed the host:\n%s", diff(moved, again))
		}

		res, err = Move(port, nic, moveOpts)
		if err != nil {
			t.Fatalf("Move(%s, %s): %v", port, nic, err)
		}
		if want := (Result{Addrs: 8, Routes: 12, Rules: 4, Neighs: 2}); res != want {
			t.Errorf("Move(%s, %s) = %+v, want %+v", port, nic, res, want)
		}
		after := snapshot(t)
		// br-phy keeps the MTU and MAC it was given (its header is left
		// out of the comparison).
		if !strings.Contains(after, port+"-peer: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9000 ") {
			t.Errorf("%s lost the MTU it was given:\n%s", port, after)
		}
		if withoutLinkHeader(after, port) != withoutLinkHeader(before, port) {
			t.Errorf("the host after a move and a move back is not as before:\n%s", diff(withoutLinkHeader(before, port), withoutLinkHeader(after, port)))
		}
		if res, err := Move(port, nic, moveOpts); err != nil || !res.Empty() {
			t.Errorf("second move back = %+v, %v; want nothing moved, no error", res, err)
		}
	})
}

// A step fails half-way, at each step in turn: the host must be exactly as
// before (br-phy down, its MTU and MAC, the routes the kernel dropped with
// the addresses), the journal gone, and the error must name the step and
// say the host was restored.
func TestMoveRollsBackAtEveryStep(t *testing.T) {
	journalOpts := func(t *testing.T) Options { o := moveOpts; o.JournalDir = t.TempDir(); return o }
	steps := stepsOf(t, journalOpts)
	t.Logf("%d steps: %v", len(steps), steps)
	nth := map[string]int{}
	for _, kind := range steps {
		nth[kind]++
		n := nth[kind]
		t.Run(fmt.Sprintf("%s#%d", kind, n), func(t *testing.T) {
			inFreshNetNS(t, func() {
				setupHost(t)
				before := snapshot(t)
				opts := journalOpts(t)
				failAt(t, kind, n)

				res, err := Move(nic, port, opts)
				if err == nil {
					t.Fatalf("Move succeeded (%+v) despite the fault", res)
				}
				t.Logf("error: %v", err)
				if !res.Empty() {
					t.Errorf("Move reported %+v after a rollback", res)
				}
				if !errors.Is(err, errInjected) {
					t.Errorf("error does not wrap the cause: %v", err)
				}
				if !strings.Contains(err.Error(), "failed") {
					t.Errorf("error does not name the failed step: %v", err)
				}
				if !strings.Contains(err.Error(), "; rolled back: ") && !strings.HasSuffix(err.Error(), "; nothing was changed") {
					t.Errorf("error does not say the host was restored: %v", err)
				}
				if got := snapshot(t); got != before {
					t.Errorf("the host after the rollback is not as before:\n%s", diff(before, got))
				}
				if left, _ := filepath.Glob(filepath.Join(opts.JournalDir, "*")); len(left) > 0 {
					t.Errorf("journal files left after a complete rollback: %v", left)
				}
			})
		})
	}
}

// The rollback fails too, at each of its steps in turn: the error says so
// and lists the commands left; running them puts the host back.
func TestRollbackFailureTellsWhatToDoByHand(t *testing.T) {
	noJournal := func(*testing.T) Options { return moveOpts }
	steps := stepsOf(t, noJournal)
	last := steps[len(steps)-1]
	lastN := 0
	for _, s := range steps {
		if s == last {
			lastN++
		}
	}
	// The undo steps: those of a move that fails at its last step.
	var undos []string
	inFreshNetNS(t, func() {
		setupHost(t)
		failAt(t, last, lastN)
		inner := fault
		fault = func(step string) error {
			if strings.HasPrefix(step, stepUndo) {
				undos = append(undos, step)
			}
			return inner(step)
		}
		if _, err := Move(nic, port, moveOpts); !errors.Is(err, errInjected) {
			t.Fatalf("Move: %v", err)
		}
	})
	t.Logf("%d undo steps: %v", len(undos), undos)
	nth := map[string]int{}
	for _, undo := range undos {
		nth[undo]++
		n := nth[undo]
		t.Run(fmt.Sprintf("%s#%d", undo, n), func(t *testing.T) {
			inFreshNetNS(t, func() {
				setupHost(t)
				before := snapshot(t)
				seenLast, seenUndo := 0, 0
				fault = func(step string) error {
					switch step {
					case last:
						if seenLast++; seenLast == lastN {
							return errInjected
						}
					case undo:
						if seenUndo++; seenUndo == n {
							return errInjected
						}
					}
					return nil
				}
				t.Cleanup(func() { fault = nil })

				_, err := Move(nic, port, moveOpts)
				if err == nil {
					t.Fatal("Move succeeded despite the fault")
				}
				t.Logf("error: %v", err)
				msg := err.Error()
				if strings.Contains(msg, "; rolled back: ") {
					// A later undo did what the failed one did not.
					if got := snapshot(t); got != before {
						t.Errorf("the error says rolled back, but the host is not as before:\n%s", diff(before, got))
					}
					return
				}
				if !strings.Contains(msg, "rolling back failed too") {
					t.Fatalf("error does not say the rollback failed: %v", err)
				}
				_, cmds, ok := strings.Cut(msg, "to finish by hand, run: ")
				if !ok {
					t.Fatalf("error lists no commands: %v", err)
				}
				if undo == stepUndo+stepDAD {
					settle(t, nic) // the wait the failed step did not do
				}
				for _, c := range strings.Split(cmds, "; ") {
					if c == "" {
						continue
					}
					if out, err := runCmd(c); err != nil {
						t.Errorf("the listed command %q fails: %v: %s", c, err, out)
					}
					if strings.Contains(c, " address add ") {
						settle(t, nic)
					}
				}
				if got := snapshot(t); got != before {
					t.Errorf("the host after the listed commands is not as before:\n%s", diff(before, got))
				}
			})
		})
	}
}

// A crash (the process killed, the node rebooted) after a move, or in the
// middle of one: Restore puts under0 and br-phy back from the journal.
func TestRestoreFromJournal(t *testing.T) {
	t.Run("after a complete move", func(t *testing.T) {
		inFreshNetNS(t, func() {
			setupHost(t)
			before := snapshot(t)
			opts := moveOpts
			opts.JournalDir = t.TempDir()
			if _, err := Move(nic, port, opts); err != nil {
				t.Fatalf("Move: %v", err)
			}
			// No move back: the crash. Then ovnhost cleanup.
			if err := Restore(opts.JournalDir, nic); err != nil {
				t.Fatalf("Restore: %v", err)
			}
			if got := snapshot(t); got != before {
				t.Errorf("the host after Restore is not as before:\n%s", diff(before, got))
			}
			if _, err := os.Stat(journalPath(opts.JournalDir, nic)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("journal still there after Restore: %v", err)
			}
			if err := Restore(opts.JournalDir, nic); err != nil {
				t.Errorf("Restore without a journal: %v", err)
			}
		})
	})

	// The crash half-way: the move stops at a step and nothing rolls back
	// (every undo fails, as if the process was gone).
	for _, at := range []struct {
		kind string
		nth  int
	}{{stepAddrDel, 3}, {stepAddrAdd, 5}, {stepRouteAdd, 4}, {stepRuleDel, 2}, {stepNeighDel, 2}} {
		t.Run(fmt.Sprintf("crash at %s#%d", at.kind, at.nth), func(t *testing.T) {
			inFreshNetNS(t, func() {
				setupHost(t)
				before := snapshot(t)
				opts := moveOpts
				opts.JournalDir = t.TempDir()
				crash(t, at.kind, at.nth)
				if _, err := Move(nic, port, opts); err == nil {
					t.Fatal("Move succeeded despite the crash")
				}
				fault = nil
				j, _, err := readJournal(opts.JournalDir, nic)
				if err != nil || j == nil || j.Phase != phaseMoving {
					t.Fatalf("journal after the crash: %+v, %v; want one in phase %s", j, err, phaseMoving)
				}
				if err := Restore(opts.JournalDir, nic); err != nil {
					t.Fatalf("Restore: %v", err)
				}
				if got := snapshot(t); got != before {
					t.Errorf("the host after Restore is not as before:\n%s", diff(before, got))
				}
			})
		})
	}

	// The next Move finds the interrupted one and puts under0 back first.
	t.Run("a move after a crash recovers first", func(t *testing.T) {
		inFreshNetNS(t, func() {
			setupHost(t)
			run(t, "ip link set "+port+" up") // as after a move back
			settle(t, port)
			before := snapshot(t)
			opts := moveOpts
			opts.JournalDir = t.TempDir()
			crash(t, stepRouteAdd, 2)
			if _, err := Move(nic, port, opts); err == nil {
				t.Fatal("Move succeeded despite the crash")
			}
			fault = nil
			if _, err := Move(nic, port, opts); err != nil {
				t.Fatalf("Move after the crash: %v", err)
			}
			if j, _, err := readJournal(opts.JournalDir, nic); err != nil || j == nil || j.Phase != phaseMoved {
				t.Fatalf("journal after the move: %+v, %v; want one in phase %s", j, err, phaseMoved)
			}
			if _, err := Move(port, nic, opts); err != nil {
				t.Fatalf("move back: %v", err)
			}
			if _, err := os.Stat(journalPath(opts.JournalDir, nic)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("journal still there after the move back: %v", err)
			}
			// br-phy keeps its MTU, MAC and up state after a move back
			// (but not after Restore, above).
			if got := snapshot(t); withoutLinkHeader(got, port) != withoutLinkHeader(before, port) {
				t.Errorf("the host after move back is not as before:\n%s", diff(withoutLinkHeader(before, port), withoutLinkHeader(got, port)))
			}
		})
	})
}

// crash makes the nth step of kind fail and every undo too: the host is
// left half-way, as a killed process leaves it.
func crash(t *testing.T, kind string, nth int) {
	seen := 0
	fault = func(step string) error {
		if strings.HasPrefix(step, stepUndo) {
			return errInjected
		}
		if step == kind {
			if seen++; seen == nth {
				return errInjected
			}
		}
		return nil
	}
	t.Cleanup(func() { fault = nil })
}

// What cannot be moved exactly is refused before any change.
func TestMoveRefusesWhatItCannotCarry(t *testing.T) {
	for _, tc := range []struct {
		name, cmd, want string
	}{
		{"nexthop object", "ip nexthop add id 7 via 10.99.0.1 dev " + nic + "; ip route add 10.60.0.0/24 nhid 7",
			"through " + nic + " uses a nexthop object (ip nexthop)"},
		{"address metric", "ip address add 10.97.0.2/24 dev " + nic + " metric 77",
			"address 10.97.0.2/24 of " + nic + " has a prefix route metric of its own (77"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inFreshNetNS(t, func() {
				setupHost(t)
				for _, c := range strings.Split(tc.cmd, "; ") {
					run(t, c)
				}
				before := snapshot(t)
				_, err := Move(nic, port, moveOpts)
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Move: %v; want an error containing %q", err, tc.want)
				}
				if got := snapshot(t); got != before {
					t.Errorf("a refused move changed the host:\n%s", diff(before, got))
				}
			})
		})
	}
}
