// A client-go contender for the tests of the Kubernetes Lease store: it runs
// leaderelection.RunOrDie with a LeaseLock on one Lease and, while it leads,
// appends `LABEL NS` to a log every 10 ms, NS from CLOCK_MONOTONIC (the
// format of tests/support/ticker.rs), so that its tenure and elect's are
// compared on one clock. It prints "leading" and "stopped" on stdout, and
// ends when it stops leading or on SIGTERM (releasing the Lease).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the kubeconfig file")
	namespace := flag.String("namespace", "default", "the Lease's namespace")
	name := flag.String("name", "", "the Lease's name")
	identity := flag.String("identity", "", "this contender's holderIdentity")
	leaseDuration := flag.Duration("lease-duration", 15*time.Second, "LeaseDuration")
	renewDeadline := flag.Duration("renew-deadline", 10*time.Second, "RenewDeadline")
	retryPeriod := flag.Duration("retry-period", 2*time.Second, "RetryPeriod")
	label := flag.String("label", "client-go", "the label of its ticks")
	ticks := flag.String("ticks", "", "the log its ticks are appended to")
	flag.Parse()
	if *name == "" || *identity == "" || *ticks == "" || *kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "usage: contender --kubeconfig F --name N --identity I --ticks LOG [--namespace NS] [--lease-duration D --renew-deadline D --retry-period D] [--label L]")
		os.Exit(64)
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fail(err)
	}
	log, err := os.OpenFile(*ticks, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fail(err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: *namespace, Name: *name},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: *identity},
	}
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   *leaseDuration,
		RenewDeadline:   *renewDeadline,
		RetryPeriod:     *retryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				fmt.Println("leading")
				tick := time.NewTicker(10 * time.Millisecond)
				defer tick.Stop()
				for {
					var now unix.Timespec
					if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &now); err != nil {
						fail(err)
					}
					// One write(2) a line: lines of several tickers never tear.
					if _, err := fmt.Fprintf(log, "%s %d\n", *label, now.Nano()); err != nil {
						fail(err)
					}
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
					}
				}
			},
			OnStoppedLeading: func() {
				fmt.Println("stopped")
			},
		},
	})
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "contender:", err)
	os.Exit(1)
}
