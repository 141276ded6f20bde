package hostcheck

// ExplainExecWith is ExplainExec on the given facts (tests).
var ExplainExecWith = explainExec

// CentOS7Rules is what iptables-save prints on a fresh CentOS 7 (the
// firewall tests' fixture, for doctor's tests too).
const CentOS7Rules = centosDefault
