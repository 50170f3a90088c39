// client-go-elect: client-go's tools/leaderelection on a Lease, with the
// flags and the output of lease-elect, so that the two can be run side by
// side against one API server (issue 46). A measuring instrument, not a
// product: client-go as its users write it (a LeaseLock, ReleaseOnCancel,
// SIGTERM cancelling the context), nothing added to its decisions.
//
//	client-go-elect --kubeconfig F --namespace NS --name NAME [--identity ID]
//	    [--lease-duration S --renew-deadline S --retry-period S]
//	    [--candidates N [--lease-each]] [-- COMMAND...]
//
// Stdout: LEADING <id>, STOPPED <id>, NEW_LEADER <id>, as the crate's
// examples/elect.rs prints them. While leading it runs COMMAND with
// LEASE_ELECT_TERM (the Lease's resourceVersion read at OnStartedLeading:
// client-go has no token), LEASE_ELECT_IDENTITY and LEASE_ELECT_LEASE, and
// sends it SIGTERM when client-go cancels OnStartedLeading's context (then
// SIGKILL after 10 s, lease-elect's default --grace; at once when this
// process dies, as work in the process would). After a lost term it
// competes again, as lease-elect does; SIGTERM or SIGINT ends it, releasing
// the Lease (ReleaseOnCancel) and then waiting for COMMAND. --candidates N
// runs N candidates in this one process (<identity>-0 ... -N-1), for the
// scale benchmark; --lease-each puts each on a Lease of its own (<name>-<i>).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// The timings, as the flags set them.
var leaseDuration, renewDeadline, retryPeriod = 15 * time.Second, 10 * time.Second, 2 * time.Second

// seconds reads a duration as lease-elect does: seconds (15, 1.5) or a Go
// duration (15s, 1m30s).
type seconds struct{ d *time.Duration }

func (s seconds) String() string {
	if s.d == nil {
		return ""
	}
	return s.d.String()
}

func (s seconds) Set(v string) error {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		*s.d = time.Duration(f * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(v)
	*s.d = d
	return err
}

// printable keeps text from the server from writing control characters
// to the terminal.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "a kubeconfig file")
	namespace := flag.String("namespace", "default", "the Lease's namespace")
	name := flag.String("name", "", "the Lease's name (required)")
	hostname, _ := os.Hostname()
	identity := flag.String("identity", hostname+"_"+string(uuid.NewUUID()), "this candidate's identity")
	candidates := flag.Int("candidates", 1, "run this many candidates in this process, named <identity>-<i> (the scale benchmark)")
	leaseEach := flag.Bool("lease-each", false, "with --candidates, each on a Lease of its own, <name>-<i>")
	flag.Var(seconds{&leaseDuration}, "lease-duration", "default 15s")
	flag.Var(seconds{&renewDeadline}, "renew-deadline", "default 10s")
	flag.Var(seconds{&retryPeriod}, "retry-period", "default 2s")
	flag.Parse()
	command := flag.Args()
	if *name == "" {
		fmt.Fprintln(os.Stderr, "client-go-elect: --name is required")
		os.Exit(2)
	}

	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client-go-elect:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *candidates <= 1 {
		elect(ctx, config, *namespace, *name, *identity, command)
		return
	}
	// Many candidates in one process (the scale benchmark): each with its
	// own clientset (and so its own rate limiter), as separate programs
	// would have; they share client-go's cached transport.
	var all sync.WaitGroup
	for i := 0; i < *candidates; i++ {
		all.Add(1)
		lease := *name
		if *leaseEach {
			lease = fmt.Sprintf("%s-%d", *name, i)
		}
		go func(lease, id string) {
			defer all.Done()
			elect(ctx, config, *namespace, lease, id, command)
		}(lease, fmt.Sprintf("%s-%d", *identity, i))
	}
	all.Wait()
}

// elect competes for the Lease as identity until ctx is cancelled.
func elect(ctx context.Context, base *rest.Config, namespace, name, identity string, command []string) {
	config := rest.CopyConfig(base)
	config.UserAgent = "client-go-elect/" + identity
	client := kubernetes.NewForConfigOrDie(config)
	var work sync.WaitGroup
	lec := leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: name},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
		},
		LeaseDuration:   leaseDuration,
		RenewDeadline:   renewDeadline,
		RetryPeriod:     retryPeriod,
		ReleaseOnCancel: true,
		Name:            name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				work.Add(1)
				defer work.Done()
				token := "-"
				if lease, err := client.CoordinationV1().Leases(namespace).Get(ctx, name, metav1.GetOptions{}); err == nil {
					token = lease.ResourceVersion
				}
				fmt.Println("LEADING", printable(identity))
				if len(command) == 0 {
					return
				}
				cmd := exec.CommandContext(ctx, command[0], command[1:]...)
				cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
				cmd.Env = append(os.Environ(), "LEASE_ELECT_TERM="+token,
					"LEASE_ELECT_IDENTITY="+identity, "LEASE_ELECT_LEASE="+namespace+"/"+name)
				// Work in the process dies with it: COMMAND is killed with it too.
				cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
				cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
				cmd.WaitDelay = 10 * time.Second
				if err := cmd.Run(); err != nil && ctx.Err() == nil {
					fmt.Fprintln(os.Stderr, "client-go-elect: COMMAND:", err)
				}
			},
			OnStoppedLeading: func() { fmt.Println("STOPPED", printable(identity)) },
			OnNewLeader:      func(id string) { fmt.Println("NEW_LEADER", printable(id)) },
		},
	}
	for ctx.Err() == nil {
		elector, err := leaderelection.NewLeaderElector(lec)
		if err != nil {
			fmt.Fprintln(os.Stderr, "client-go-elect:", err)
			os.Exit(2)
		}
		elector.Run(ctx)
		// Run has returned (and released): client-go has cancelled the work's
		// context by now; wait for COMMAND before competing again or exiting.
		work.Wait()
	}
}
