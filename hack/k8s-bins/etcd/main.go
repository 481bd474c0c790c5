// Command etcd runs the etcd server from the go.etcd.io/etcd/server/v3 module
// pinned by k8s.io/kubernetes, so tests use the etcd release Kubernetes was built against.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
