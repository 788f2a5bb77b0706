package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// serverCPU measures the CPU time of a PostgreSQL server: its postmaster
// and every process it started (backends, walsenders, background
// workers), those that exited included (their time is the postmaster's
// cutime and cstime once it reaped them).
type serverCPU struct {
	postmaster int
}

// newServerCPU reads the postmaster's pid from dataDir/postmaster.pid.
func newServerCPU(dataDir string) (*serverCPU, error) {
	if dataDir == "" {
		return nil, fmt.Errorf("-pgdata is required to measure the server's CPU (run.sh sets it)")
	}
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return nil, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		return nil, fmt.Errorf("postmaster.pid: %w", err)
	}
	return &serverCPU{postmaster: pid}, nil
}

// seconds returns the server's CPU seconds so far.
func (s *serverCPU) seconds() float64 {
	total := 0.0
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, ok := procStat(pid)
		if !ok {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		switch {
		case pid == s.postmaster: // its own time and its reaped children's
			total += ticks(f[11]) + ticks(f[12]) + ticks(f[13]) + ticks(f[14])
		case ppid == s.postmaster:
			total += ticks(f[11]) + ticks(f[12])
		}
	}
	return total
}

// procStat returns the fields of /proc/pid/stat after the command name
// (field 3, the state, is f[0]).
func procStat(pid int) ([]string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 > len(b) {
		return nil, false
	}
	f := strings.Fields(string(b[i+2:]))
	return f, len(f) > 14
}

// ticks converts clock ticks (100 a second on Linux) to seconds.
func ticks(s string) float64 {
	v, _ := strconv.ParseFloat(s, 64)
	return v / 100
}

// selfCPU returns this process's CPU seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
