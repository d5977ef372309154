package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Proc is one child process of the topology. Its command line, environment and log file are
// kept, so it can be started again on the same ports and data after it was killed.
type Proc struct {
	Name    string // e.g. temporal-history, courier-worker-1
	path    string
	args    []string
	env     []string
	cred    *syscall.Credential // run as another user (PostgreSQL as postgres when we are root)
	logPath string
	stopSig syscall.Signal // what Stop sends first; default SIGTERM

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the current run exits
	err  error         // the current run's exit error, once done
}

// Start runs the process (again). Its output is appended to its log file. It is started in a
// process group of its own, so a Ctrl-C in the terminal reaches only the orchestrator, which
// stops the processes in order.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("%s is already running (pid %d)", p.Name, p.cmd.Process.Pid)
		}
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logf, logf
	// Pdeathsig: if the orchestrator dies (a test binary killed by its timeout), its children
	// die with it instead of holding ports and files.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: p.cred, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.err = cmd, done, nil
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// Pid is the current run's process id (0 before the first start).
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Done is closed when the current run exits.
func (p *Proc) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return p.done
}

// Running tells whether the current run has not exited.
func (p *Proc) Running() bool {
	select {
	case <-p.Done():
		return false
	default:
		return true
	}
}

// ExitErr is how the last run ended (nil while it runs or if it exited 0).
func (p *Proc) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// LogPath is the file the process writes its output to.
func (p *Proc) LogPath() string { return p.logPath }

// Signal sends sig to the current run, by its pid.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return errors.New(p.Name + " was never started")
	}
	select {
	case <-done:
		return fmt.Errorf("%s is not running", p.Name)
	default:
	}
	return cmd.Process.Signal(sig)
}

// Kill sends SIGKILL and waits until the process has exited.
func (p *Proc) Kill() error {
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.Done()
	return nil
}

// Stop asks the process to stop (SIGTERM, or the process's own stop signal), waits up to
// timeout, then kills it. A process that is not running is left alone.
func (p *Proc) Stop(timeout time.Duration) {
	if !p.Running() {
		return
	}
	sig := p.stopSig
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	if p.Signal(sig) != nil {
		return
	}
	select {
	case <-p.Done():
	case <-time.After(timeout):
		_ = p.Kill()
	}
}
