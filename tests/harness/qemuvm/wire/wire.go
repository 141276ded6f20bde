// Package wire is the protocol between the test harness (host) and vmagent
// (guest) on the VM's virtio-serial control port: one JSON object per line
// each way. Requests carry an ID; the agent answers each with the same ID,
// in any order, so several commands can run at once.
package wire

// PortName is the virtio-serial port name the agent looks for in
// /sys/class/virtio-ports/*/name.
const PortName = "ovnhost.ctl"

// Ops the agent understands.
const (
	// OpRun runs Argv to completion and returns its exit status and output.
	OpRun = "run"
	// OpSpawn starts Argv in the background, output into LogFile, and
	// returns its pid at once.
	OpSpawn = "spawn"
	// OpWait waits for a spawned Pid to exit (up to TimeoutMS).
	OpWait = "wait"
	// OpSignal sends Signal to a spawned Pid (its process group when Group).
	OpSignal = "signal"
	// OpWatch waits until LogFile contains Pattern (inotify), failing
	// early when a spawned Pid exits first, or after TimeoutMS.
	OpWatch = "watch"
)

// Request is one host-to-guest message.
type Request struct {
	ID        uint64   `json:"id"`
	Op        string   `json:"op"`
	Argv      []string `json:"argv,omitempty"`
	Env       []string `json:"env,omitempty"` // added to the agent's environment
	Dir       string   `json:"dir,omitempty"`
	Stdin     []byte   `json:"stdin,omitempty"`
	TimeoutMS int64    `json:"timeout_ms,omitempty"` // run: kill the group after it; wait: give up
	LogFile   string   `json:"log_file,omitempty"`   // spawn, watch
	Pattern   string   `json:"pattern,omitempty"`    // watch: a substring
	Count     int      `json:"count,omitempty"`      // watch: this many times (default 1)
	Pid       int      `json:"pid,omitempty"`        // wait, signal, watch
	Signal    int      `json:"signal,omitempty"`
	Group     bool     `json:"group,omitempty"`
}

// Response is one guest-to-host message. ID 0 is the agent's hello, sent
// once when it has opened the port.
type Response struct {
	ID       uint64 `json:"id"`
	Hello    string `json:"hello,omitempty"` // kernel release in the hello
	Pid      int    `json:"pid,omitempty"`
	Exit     int    `json:"exit"`             // exit code; -1 when killed by a signal
	Signal   int    `json:"signal,omitempty"` // the signal that killed it
	TimedOut bool   `json:"timed_out,omitempty"`
	Stdout   []byte `json:"stdout,omitempty"`
	Stderr   []byte `json:"stderr,omitempty"`
	Err      string `json:"err,omitempty"` // the agent could not do what was asked
}
