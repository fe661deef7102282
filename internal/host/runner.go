package host

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
)

// Command is a program to run.
type Command struct {
	Name string
	Args []string
	// Env is added to the job's environment.
	Env []string
	// Stdin is the program's input, if any.
	Stdin io.Reader
}

func (c Command) String() string {
	return strings.Join(append([]string{c.Name}, c.Args...), " ")
}

// Runner runs programs; tests replace it to see the commands.
type Runner interface {
	// Run runs the command and returns what it wrote to stdout. A failure
	// says which command failed, how, and the end of what it wrote to
	// stderr.
	Run(ctx context.Context, cmd Command) ([]byte, error)
}

// Exec runs programs with os/exec.
type Exec struct{}

// stderrTail is how much of a failed command's stderr an error quotes.
const stderrTail = 2048

// Run implements Runner.
func (Exec) Run(ctx context.Context, c Command) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.Name, c.Args...)
	cmd.Env = append(cmd.Environ(), c.Env...)
	cmd.Stdin = c.Stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > stderrTail {
			msg = "…" + msg[len(msg)-stderrTail:]
		}
		if msg != "" {
			return stdout.Bytes(), fmt.Errorf("%s: %w: %s", c, err, msg)
		}
		return stdout.Bytes(), fmt.Errorf("%s: %w", c, err)
	}
	return stdout.Bytes(), nil
}
