package testenv

import (
	"os/exec"
	"runtime"
	"syscall"
)

// StartTied starts cmd so that it never outlives this process (the kernel
// kills it when this process ends, however it ends) and returns a channel
// that receives cmd.Wait's result. The kernel sends Pdeathsig's signal when
// the thread that started the child ends, not the process, and Go ends a
// thread whose goroutine exits while locked to it: the child is started on a
// thread locked for as long as the child runs, so that only this process's
// end, not a thread's, kills it.
func StartTied(cmd *exec.Cmd) (<-chan error, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	started, exited := make(chan error, 1), make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return exited, nil
}
