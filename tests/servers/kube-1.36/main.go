// A client-go contender for the tests of the Kubernetes Lease store: it runs
// leaderelection.RunOrDie with a LeaseLock on one Lease and, while it leads,
// appends `LABEL NS` to a log every 10 ms, NS from CLOCK_MONOTONIC (the
// format of tests/support/ticker.rs), so that its tenure and elect's are
// compared on one clock. It stops ticking when the context client-go gives
// OnStartedLeading is cancelled, as a correct client-go program stops its
// work, and logs `LABEL:cancelled NS` then; each renewal client-go got an
// answer to is logged as `LABEL:renewed NS`, at the answer. It prints
// "leading", "cancelled" and "stopped" on stdout, and ends when it stops
// leading or on SIGTERM (releasing the Lease, with --release-on-cancel).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
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
	server := flag.String("server", "", "the API server's URL, if not the kubeconfig's")
	namespace := flag.String("namespace", "default", "the Lease's namespace")
	name := flag.String("name", "", "the Lease's name")
	identity := flag.String("identity", "", "this contender's holderIdentity")
	leaseDuration := flag.Duration("lease-duration", 15*time.Second, "LeaseDuration")
	renewDeadline := flag.Duration("renew-deadline", 10*time.Second, "RenewDeadline")
	retryPeriod := flag.Duration("retry-period", 2*time.Second, "RetryPeriod")
	label := flag.String("label", "client-go", "the label of its ticks")
	ticks := flag.String("ticks", "", "the log its ticks are appended to")
	releaseOnCancel := flag.Bool("release-on-cancel", true, "ReleaseOnCancel")
	flag.Parse()
	if *name == "" || *identity == "" || *ticks == "" || *kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "usage: contender --kubeconfig F --name N --identity I --ticks LOG [--namespace NS] [--server URL] [--lease-duration D --renew-deadline D --retry-period D] [--release-on-cancel=B] [--label L]")
		os.Exit(64)
	}
	config, err := clientcmd.BuildConfigFromFlags(*server, *kubeconfig)
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
	lock := &loggedLock{
		LeaseLock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: *namespace, Name: *name},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: *identity},
		},
		log:   log,
		label: *label,
	}
	// Its work is done once it logged its cancellation: ended before the
	// program ends.
	var leading atomic.Bool
	worked := make(chan struct{})
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   *leaseDuration,
		RenewDeadline:   *renewDeadline,
		RetryPeriod:     *retryPeriod,
		ReleaseOnCancel: *releaseOnCancel,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				leading.Store(true)
				defer close(worked)
				fmt.Println("leading")
				tick := time.NewTicker(10 * time.Millisecond)
				defer tick.Stop()
				for {
					stamp(log, *label)
					select {
					case <-ctx.Done():
						stamp(log, *label+":cancelled")
						fmt.Println("cancelled")
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
	if leading.Load() {
		<-worked
	}
}

// loggedLock is client-go's LeaseLock, logging each write it got an answer to.
type loggedLock struct {
	*resourcelock.LeaseLock
	log   *os.File
	label string
}

func (l *loggedLock) Update(ctx context.Context, record resourcelock.LeaderElectionRecord) error {
	err := l.LeaseLock.Update(ctx, record)
	if err == nil && record.HolderIdentity != "" {
		stamp(l.log, l.label+":renewed")
	}
	return err
}

// stamp appends `label NS` to log, NS from CLOCK_MONOTONIC, in one write(2):
// lines of several tickers never tear.
func stamp(log *os.File, label string) {
	var now unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &now); err != nil {
		fail(err)
	}
	if _, err := fmt.Fprintf(log, "%s %d\n", label, now.Nano()); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "contender:", err)
	os.Exit(1)
}
