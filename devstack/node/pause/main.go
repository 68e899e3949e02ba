// The node's sandbox ("pause") image: holds a pod's namespaces and waits for SIGTERM/SIGINT.
// No registry is reachable here, so devstack/node.sh builds it (static, FROM scratch) instead of
// pulling registry.k8s.io/pause.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	<-sigs
}
