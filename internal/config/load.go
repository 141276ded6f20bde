package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// ConfigEnv names the configuration file when --config is not given.
const ConfigEnv = "OVNHOST_CONFIG"

// Load reads the configuration of `ovnhost run` from args (without the
// program and subcommand names), the environment (os.Environ form) and the
// file named by --config or OVNHOST_CONFIG. It returns every problem found,
// as Errors, or flag.ErrHelp when help was asked for.
func Load(args, environ []string, usage io.Writer) (*Config, error) {
	table := settings()
	fs := flag.NewFlagSet("ovnhost run", flag.ContinueOnError)
	fs.SetOutput(usage)
	flagVals := make(map[string]*string, len(table))
	for _, s := range table {
		help := s.Help
		if len(s.Env) > 0 {
			help += " [env " + strings.Join(s.Env, ", ") + "]"
		}
		v := &flagValue{val: s.Default, isBool: s.Bool}
		flagVals[s.Name] = &v.val
		fs.Var(v, s.Name, help)
	}
	file := fs.String("config", "", "YAML file whose keys are these flag names [env "+ConfigEnv+"]")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, Errors{{Key: "flags", Source: "flag", Reason: err.Error(), Fix: "run `ovnhost run --help` for the list"}}
	}
	if fs.NArg() > 0 {
		return nil, Errors{{Key: fs.Arg(0), Source: "flag", Reason: "unexpected argument", Fix: "settings are flags such as --node-name=NAME"}}
	}
	setFlags := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { setFlags[f.Name] = true })

	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	var errs Errors
	unknown, ignored := unknownEnv(table, env)
	errs = append(errs, unknown...)

	path := *file
	if !setFlags["config"] {
		path = env[ConfigEnv]
	}
	var fileVals map[string]string
	if path != "" {
		var ferrs Errors
		fileVals, ferrs = readFile(path, table)
		errs = append(errs, ferrs...)
	}

	c := &Config{File: path, IgnoredEnv: ignored}
	sslDefault := false
	for _, s := range table {
		key, source, val := s.Name, "default", s.Default
		if v, ok := fileVals[s.Name]; ok {
			source, val = path, v
		}
		for _, e := range s.Env {
			if v, ok := env[e]; ok {
				key, source, val = e, "environment", v
				break
			}
		}
		if v, ok := env[envName(s.Name)]; ok && source != "environment" {
			key, source, val = envName(s.Name), "environment", v
		}
		if setFlags[s.Name] {
			key, source, val = "--"+s.Name, "flag", *flagVals[s.Name]
		}
		if s.Name == "enable-ssl" {
			sslDefault = source == "default"
		}
		if err := s.Set(c, val); err != nil {
			e := &Error{Key: key, Source: source, Value: val, Reason: err.Error()}
			var p *problem
			if errors.As(err, &p) {
				e.Fix = p.fix
			}
			errs = append(errs, e)
		}
	}
	// SSL is the central's default (docs/central.md, "Certificates"): its
	// ports are on the node network. A node keeps ENABLE_SSL's Kube-OVN
	// default (off) and follows what the central serves.
	if sslDefault && c.IsCentral() {
		c.EnableSSL = true
	}
	if c.EnableSSL {
		def := func(dst *string, name string) {
			if *dst == "" {
				*dst = filepath.Join(c.SSLDir, name)
			}
		}
		def(&c.SSLKey, "ovn-privkey.pem")
		def(&c.SSLCert, "ovn-cert.pem")
		def(&c.SSLCACert, "cacert.pem")
	}
	if len(errs) == 0 {
		errs = append(errs, c.finish()...)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return c, nil
}

// serviceLinkEnv matches the variables Kubernetes injects for a Service
// named ovnhost or ovnhost-* in the pod's namespace (enableServiceLinks):
// OVNHOST_X_SERVICE_HOST, OVNHOST_X_SERVICE_PORT[_NAME], OVNHOST_X_PORT,
// OVNHOST_X_PORT_53_UDP[_PROTO|_PORT|_ADDR].
var serviceLinkEnv = regexp.MustCompile(`^OVNHOST(_[A-Z0-9_]+?)?(_SERVICE_HOST|_SERVICE_PORT(_[A-Z0-9_]+)?|_PORT(_[0-9]+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)?)$`)

// unknownEnv reports OVNHOST_* variables that name no setting: a typo there
// would otherwise be silently ignored. Service-link variables are not
// settings anyone wrote: they are returned apart, to be logged at debug.
func unknownEnv(table []setting, env map[string]string) (Errors, []string) {
	known := map[string]bool{ConfigEnv: true}
	for _, s := range table {
		known[envName(s.Name)] = true
	}
	var errs Errors
	var names, ignored []string
	for k := range env {
		if strings.HasPrefix(k, "OVNHOST_") && !known[k] && !strings.HasPrefix(k, "OVNHOST_TEST_") && k != "OVNHOST_BIN" {
			if serviceLinkEnv.MatchString(k) {
				ignored = append(ignored, k)
				continue
			}
			names = append(names, k)
		}
	}
	sort.Strings(names)
	sort.Strings(ignored)
	for _, k := range names {
		errs = append(errs, &Error{Key: k, Source: "environment", Reason: "unknown setting", Fix: "remove it or use one of the names listed by `ovnhost run --help`" + suggest(strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(k, "OVNHOST_"), "_", "-")), table, true)})
	}
	return errs, ignored
}

// readFile parses the YAML configuration file; keys are flag names.
func readFile(path string, table []setting) (map[string]string, Errors) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, Errors{{Key: "config", Source: "flag or " + ConfigEnv, Value: path, Reason: err.Error(), Fix: "point --config at a readable YAML file"}}
	}
	var raw map[string]any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, Errors{{Key: "config", Value: path, Reason: "not valid YAML: " + err.Error(), Fix: "fix the syntax; keys are the flag names, e.g. node-name: worker-1"}}
	}
	byName := map[string]bool{}
	for _, s := range table {
		byName[s.Name] = true
	}
	out := map[string]string{}
	var errs Errors
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !byName[k] {
			errs = append(errs, &Error{Key: k, Source: path, Reason: "unknown setting", Fix: "remove it or use a flag name of `ovnhost run --help`" + suggest(k, table, false)})
			continue
		}
		out[k] = scalar(raw[k])
	}
	return out, errs
}

func scalar(v any) string {
	switch t := v.(type) {
	case nil:
		return ""
	case []any:
		parts := make([]string, len(t))
		for i, e := range t {
			parts[i] = scalar(e)
		}
		return strings.Join(parts, ",")
	case float64:
		if t == float64(int64(t)) {
			return fmt.Sprintf("%d", int64(t))
		}
		return fmt.Sprint(t)
	default:
		return fmt.Sprint(t)
	}
}

// suggest names the closest setting, when one is close.
func suggest(k string, table []setting, env bool) string {
	best, bestD := "", 4
	for _, s := range table {
		if d := distance(k, s.Name); d < bestD {
			best, bestD = s.Name, d
		}
	}
	if best == "" {
		return ""
	}
	if env {
		return fmt.Sprintf(" (did you mean %s?)", envName(best))
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

// distance is the Levenshtein distance of two short strings.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// flagValue keeps a flag's text for the setter to validate later, so a bad
// flag is reported like a bad environment variable, with its fix.
type flagValue struct {
	val    string
	isBool bool
}

func (f *flagValue) String() string     { return f.val }
func (f *flagValue) Set(v string) error { f.val = v; return nil }
func (f *flagValue) IsBoolFlag() bool   { return f.isBool }
