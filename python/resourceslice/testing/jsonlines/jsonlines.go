// Package jsonlines is the Go side of resourceslice.testing's JSON-lines processes
// (_jsonlines.py is the Python side): commands come one JSON object a line on stdin, and
// answers (with the command's "id") and events (with an "event" name) go one JSON object a
// line on stdout. The test helpers written in Go (dracluster, kubeletharness) and the
// benchmark's Go drivers (benches/godriver) all speak it through this package, so the loop
// and the serialised output are written once.
//
// It is a module of its own, with no requirements, so that each program's go.mod (and its
// go-<release>.mod variants) can take it with a relative replace directive; it ships in the
// wheel beside them.
package jsonlines

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Output writes whole JSON lines to Writer, one at a time: the command loop's answers and
// the events of any goroutine never interleave.
type Output struct {
	Writer io.Writer
	// EventTimes adds "at" to each event (a map with "event"): the time it was written, in
	// Unix seconds, so that a test can time a chain of events.
	EventTimes bool

	mutex sync.Mutex
}

// Write writes v as one line. A failed write ends the process: the test that reads it is
// gone, or will wait for a line that never comes.
func (o *Output) Write(v any) {
	if m, ok := v.(map[string]any); ok && o.EventTimes {
		if _, isEvent := m["event"]; isEvent {
			m["at"] = float64(time.Now().UnixNano()) / 1e9
		}
	}
	o.mutex.Lock()
	defer o.mutex.Unlock()
	if err := json.NewEncoder(o.Writer).Encode(v); err != nil {
		fmt.Fprintf(os.Stderr, "write stdout: %v\n", err)
		os.Exit(1)
	}
}

// ErrorString is err as an answer's or event's "error": "" for none.
func ErrorString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Serve reads commands from r until it closes (the test is done with the process) and
// returns once each has been answered. Each line is decoded into a C and handed to handle in
// a goroutine of its own, so calls run side by side (as kubelet works on several pods at
// once); what handle returns is written to out as the answer. A line that is not JSON is
// answered with {"error": "bad command: ..."}, which has no "id" to wait for.
//
// A nil handle: the program takes no commands; Serve only waits for r to close.
func Serve[C any](r io.Reader, out *Output, handle func(C) any) {
	if handle == nil {
		_, _ = io.Copy(io.Discard, r)
		return
	}
	var calls sync.WaitGroup
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 1<<20), 1<<24)
	for scanner.Scan() {
		var cmd C
		if err := json.Unmarshal(scanner.Bytes(), &cmd); err != nil {
			out.Write(map[string]any{"error": fmt.Sprintf("bad command: %v", err)})
			continue
		}
		calls.Go(func() { out.Write(handle(cmd)) })
	}
	calls.Wait()
}
