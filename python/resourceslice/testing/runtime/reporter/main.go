// Command reporter is the process of a test container (resourceslice.testing.runtime): it
// prints one JSON line to stdout with what it sees from inside (its environment, its mounts,
// the device nodes under /dev, the contents of the files named by its arguments and by
// REPORTER_FILES, colon-separated), then waits for SIGTERM and exits 0 — or exits 0 at once
// when REPORTER_ONCE is set (run by `runc exec` in a running container: what it sees now).
// With REPORTER_IGNORE_TERM set it ignores SIGTERM, as a process that will not stop does, and
// only SIGKILL ends it.
//
// Static (CGO_ENABLED=0) and without dependencies: the container's rootfs holds nothing else.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

type mount struct {
	MountPoint string `json:"mount_point"`
	Source     string `json:"source"`
	FSType     string `json:"fs_type"`
	Root       string `json:"root"`
}

type device struct {
	Path  string `json:"path"`
	Type  string `json:"type"`
	Major uint32 `json:"major"`
	Minor uint32 `json:"minor"`
}

type report struct {
	Env     map[string]string  `json:"env"`
	Mounts  []mount            `json:"mounts"`
	Devices []device           `json:"devices"`
	Files   map[string]*string `json:"files"`
	Errors  map[string]string  `json:"errors"`
}

// unescape undoes mountinfo's octal escapes (\040 for a space, ...).
func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%3o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mounts parses /proc/self/mountinfo: "id parent major:minor root mountpoint options
// [optional fields...] - fstype source superoptions".
func mounts() ([]mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mount
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		sep := -1
		for i, field := range fields {
			if field == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
			continue
		}
		out = append(out, mount{
			MountPoint: unescape(fields[4]),
			Root:       unescape(fields[3]),
			FSType:     fields[sep+1],
			Source:     unescape(fields[sep+2]),
		})
	}
	return out, scanner.Err()
}

func devices() ([]device, error) {
	var out []device
	err := filepath.WalkDir("/dev", func(path string, entry fs.DirEntry, err error) error {
		if err != nil {
			return nil // a directory we may not read (or a vanished pts): skipped
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil {
			return nil
		}
		var kind string
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFCHR:
			kind = "c"
		case syscall.S_IFBLK:
			kind = "b"
		default:
			return nil
		}
		rdev := uint64(st.Rdev)
		major := uint32((rdev>>8)&0xfff) | uint32((rdev>>32)&^0xfff)
		minor := uint32(rdev&0xff) | uint32((rdev>>12)&^0xff)
		out = append(out, device{Path: path, Type: kind, Major: major, Minor: minor})
		return nil
	})
	return out, err
}

func main() {
	// Registered before the report is written: a SIGTERM right after it is not lost.
	term := make(chan os.Signal, 1)
	ignoreTerm := os.Getenv("REPORTER_IGNORE_TERM") != ""
	if ignoreTerm {
		signal.Ignore(syscall.SIGTERM)
	} else {
		signal.Notify(term, syscall.SIGTERM)
	}

	r := report{Env: map[string]string{}, Files: map[string]*string{}, Errors: map[string]string{}}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		r.Env[k] = v
	}
	var err error
	if r.Mounts, err = mounts(); err != nil {
		r.Errors["mounts"] = err.Error()
	}
	if r.Devices, err = devices(); err != nil {
		r.Errors["devices"] = err.Error()
	}
	names := os.Args[1:]
	if extra := os.Getenv("REPORTER_FILES"); extra != "" {
		names = append(names, strings.Split(extra, ":")...)
	}
	for _, name := range names {
		data, err := os.ReadFile(name)
		if err != nil {
			r.Files[name] = nil
			r.Errors[name] = err.Error()
			continue
		}
		text := string(data)
		r.Files[name] = &text
	}
	line, err := json.Marshal(r)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reporter:", err)
		os.Exit(2)
	}
	os.Stdout.Write(append(line, '\n'))
	if os.Getenv("REPORTER_ONCE") != "" {
		return
	}
	for ignoreTerm {
		time.Sleep(time.Hour) // a sleeper, not a deadlock: only SIGKILL ends it
	}
	<-term
}
