package hostcheck

import (
	"fmt"
	"path/filepath"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
)

// CheckPaths checks that every directory exists or can be created, is
// writable and is not on a read-only filesystem (the Talos
// `mkdir /etc/origin: read-only file system`).
func CheckPaths(ps []nodeconfig.WritableDir, f PathFacts) []Check {
	out := make([]Check, 0, len(ps))
	for _, s := range ps {
		out = append(out, checkPath(s, f))
	}
	return out
}

func checkPath(s nodeconfig.WritableDir, f PathFacts) Check {
	name := "path:" + s.Setting
	key := "--" + s.Setting
	if s.Env != "" {
		key += " (" + s.Env + ")"
	}
	relocate := func(why string) string {
		alt := s.Suggest
		if alt == s.Path {
			alt = "a writable directory"
		}
		return fmt.Sprintf("%s, or set %s to %s", why, key, alt)
	}
	info := f.Path(s.Path)
	if info.Err != nil {
		return Check{Name: name, Status: Fail, Found: fmt.Sprintf("%s: %v", s.Path, info.Err), Fix: relocate("fix the path")}
	}
	if info.Exists {
		switch {
		case !info.IsDir:
			return Check{Name: name, Status: Fail, Found: s.Path + " exists and is not a directory", Fix: relocate("remove or rename it")}
		case info.ReadOnly:
			return Check{Name: name, Status: Fail, Found: s.Path + " is on a read-only filesystem", Fix: relocate("mount it read-write")}
		case info.Writable != nil:
			return Check{Name: name, Status: Fail, Found: fmt.Sprintf("%s is not writable: %v", s.Path, info.Writable), Fix: relocate("make it writable by root")}
		}
		return Check{Name: name, Status: Pass, Found: s.Path + " is a writable directory"}
	}
	// Find the nearest existing ancestor: the directory will be created there.
	dir := s.Path
	for {
		parent := filepath.Dir(dir)
		if parent == dir {
			return Check{Name: name, Status: Fail, Found: s.Path + ": no existing ancestor", Fix: relocate("create it")}
		}
		dir = parent
		a := f.Path(dir)
		if a.Err != nil {
			return Check{Name: name, Status: Fail, Found: fmt.Sprintf("%s does not exist and %s: %v", s.Path, dir, a.Err), Fix: relocate("fix the path")}
		}
		if !a.Exists {
			continue
		}
		switch {
		case !a.IsDir:
			return Check{Name: name, Status: Fail, Found: fmt.Sprintf("%s cannot be created: %s is not a directory", s.Path, dir), Fix: relocate("remove " + dir)}
		case a.ReadOnly:
			return Check{Name: name, Status: Fail, Found: fmt.Sprintf("%s cannot be created: %s is on a read-only filesystem", s.Path, dir), Fix: relocate("create it in the host image")}
		case a.Writable != nil:
			return Check{Name: name, Status: Fail, Found: fmt.Sprintf("%s cannot be created: %s is not writable: %v", s.Path, dir, a.Writable), Fix: relocate("make " + dir + " writable")}
		}
		return Check{Name: name, Status: Pass, Found: fmt.Sprintf("%s does not exist yet; it can be created under %s", s.Path, dir)}
	}
}
