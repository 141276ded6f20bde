//go:build race

package nbtest

// Under the race detector Start serves the NB with a real ovsdb-server:
// the in-memory server's RPC layer (github.com/cenkalti/rpc2 v1.0.4,
// jsonCodec.WriteResponse) encodes concurrent responses on one encoder
// without a lock, a data race of the test server, not of ovnhost, that
// the detector reports at random.
const raceDetector = true
