package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/vishvananda/netlink"
)

// The test world's network. The API server's node proxy refuses loopback
// addresses, so the simulated kubelets need a routable one; rather than the
// machine's own interfaces, the world runs in a network namespace of its own
// that holds only loopback and a dummy interface with an address from
// TEST-NET-1 (RFC 5737, for documentation): no traffic of the tests leaves
// the namespace, and the tests pass on a machine whose only interface is
// loopback. The interface is one end of a veth pair whose other end stays in
// the namespace too (kernels without the dummy driver, like the development
// machine's, have veth).
const (
	// WorldInterface is the world's interface in its namespace.
	WorldInterface = "world0"
	// isolatedEnv marks a process already running in the world's namespace.
	isolatedEnv = "UPGRADE_TOOLKIT_WORLD_NETNS"
)

// WorldAddress is the address of WorldInterface.
var WorldAddress = &net.IPNet{IP: net.IPv4(192, 0, 2, 1), Mask: net.CIDRMask(24, 32)}

// Isolated runs run in the world's network namespace: it starts this program
// again with the same arguments in a new network namespace (and, for a user
// who may not create one, a user namespace too), sets the namespace's
// network up there, and returns the exit code of that run. Inside that run it
// calls run. Where no namespace can be made, it says why on stderr and calls
// run in place, on the machine's own network.
func Isolated(run func() int) int {
	if os.Getenv(isolatedEnv) != "" {
		if err := setUpWorldNetwork(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: setting up the network namespace: %v\n", err)
			return 1
		}
		return run()
	}
	code, err := reexecIsolated()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: cannot run in a network namespace of its own (%v); running on the machine's network\n", err)
		return run()
	}
	return code
}

// InWorldNamespace reports whether this process runs in the world's network
// namespace.
func InWorldNamespace() bool { return os.Getenv(isolatedEnv) != "" }

func reexecIsolated() (int, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	attempts := []*syscall.SysProcAttr{
		{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL},
		// Without CAP_SYS_ADMIN: as root of a user namespace of our own.
		{
			Cloneflags:  syscall.CLONE_NEWNET | syscall.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
			Pdeathsig:   syscall.SIGKILL,
		},
	}
	var errs []error
	for _, attr := range attempts {
		cmd := exec.Command(self, os.Args[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.Env = append(os.Environ(), isolatedEnv+"=1")
		cmd.SysProcAttr = attr
		if err := cmd.Start(); err != nil {
			errs = append(errs, err)
			continue
		}
		// The child gets the terminal's signals itself; pass on the ones sent
		// to this process alone.
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			for s := range sigs {
				_ = cmd.Process.Signal(s)
			}
		}()
		err := cmd.Wait()
		signal.Stop(sigs)
		close(sigs)
		var exit *exec.ExitError
		switch {
		case err == nil:
			return 0, nil
		case errors.As(err, &exit):
			if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				return 128 + int(ws.Signal()), nil
			}
			return exit.ExitCode(), nil
		default:
			return 0, err
		}
	}
	return 0, errors.Join(errs...)
}

// setUpWorldNetwork brings loopback up and adds the world's interface with
// its address and a default route through it (the API server advertises the
// address of the default route's interface).
func setUpWorldNetwork() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("finding loopback: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("bringing loopback up: %w", err)
	}
	if _, err := netlink.LinkByName(WorldInterface); err == nil {
		return nil
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: WorldInterface}, PeerName: WorldInterface + "-peer"}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("adding %s: %w", WorldInterface, err)
	}
	if err := netlink.AddrAdd(veth, &netlink.Addr{IPNet: WorldAddress}); err != nil {
		return fmt.Errorf("adding %s to %s: %w", WorldAddress, WorldInterface, err)
	}
	for _, name := range []string{WorldInterface, veth.PeerName} {
		link, err := netlink.LinkByName(name)
		if err == nil {
			err = netlink.LinkSetUp(link)
		}
		if err != nil {
			return fmt.Errorf("bringing %s up: %w", name, err)
		}
	}
	route := &netlink.Route{LinkIndex: veth.Attrs().Index, Scope: netlink.SCOPE_LINK,
		Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}}
	if err := netlink.RouteAdd(route); err != nil {
		return fmt.Errorf("adding the default route through %s: %w", WorldInterface, err)
	}
	return nil
}
