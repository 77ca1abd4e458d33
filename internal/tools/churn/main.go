// Command churn makes an informer event storm for benchmarks: it creates
// Services in one namespace at a steady rate and deletes the oldest once
// -keep of them exist, so every agent and CoreDNS watching the API server
// sees two Service events (and an EndpointSlice-free Service each time)
// per tick. scripts/bench.sh runs it during measurements (-S).
//
// It stops by itself after -for, on SIGINT or SIGTERM, and then deletes
// what it created. It prints one line with what it did.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server (required)")
	namespace := flag.String("namespace", "bench-churn", "namespace the Services are made in (created if missing)")
	rate := flag.Float64("rate", 50, "Services created per second (as many deleted once -keep exist)")
	keep := flag.Int("keep", 100, "Services alive at once")
	limit := flag.Duration("for", time.Minute, "stop after this long")
	flag.Parse()
	if err := run(*kubeconfig, *namespace, *rate, *keep, *limit); err != nil {
		fmt.Fprintln(os.Stderr, "churn:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, ns string, rate float64, keep int, limit time.Duration) error {
	switch {
	case kubeconfig == "":
		return errors.New("-kubeconfig is required")
	case rate <= 0 || rate > 1000:
		return fmt.Errorf("-rate %v: want (0, 1000]", rate)
	case keep < 1 || keep > 10000:
		return fmt.Errorf("-keep %d: want 1-10000", keep)
	case limit <= 0 || limit > 24*time.Hour:
		return fmt.Errorf("-for %v: want (0, 24h]", limit)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("reading %s: %w", kubeconfig, err)
	}
	rc.QPS, rc.Burst = float32(4*rate), int(4*rate)+10
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("client for %s: %w", kubeconfig, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()

	_, err = c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	svcs := c.CoreV1().Services(ns)
	name := func(i int) string { return fmt.Sprintf("churn-%d", i) }
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	created, deleted, failed := 0, 0, 0
	start := time.Now()
	var lastErr error
loop:
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
		}
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name(i)},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
		if _, err := svcs.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			failed++
			lastErr = err
		} else {
			created++
		}
		if old := i - keep; old >= 0 {
			if err := svcs.Delete(ctx, name(old), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				failed++
				lastErr = err
			} else {
				deleted++
			}
		}
	}
	took := time.Since(start)
	// Clean up with a fresh deadline: the run's has passed.
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	list, err := svcs.List(cctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing Services in %s to delete them: %w", ns, err)
	}
	for _, s := range list.Items {
		if err := svcs.Delete(cctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %s/%s: %w", ns, s.Name, err)
		}
	}
	fmt.Printf("churn: %d Services created, %d deleted in %.1f s (%.1f events/s), %d requests failed\n",
		created, deleted, took.Seconds(), float64(created+deleted)/took.Seconds(), failed)
	if failed > 0 {
		fmt.Printf("churn: last failure: %v\n", lastErr)
	}
	return nil
}
