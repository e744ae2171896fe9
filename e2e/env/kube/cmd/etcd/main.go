// Command etcd is the etcd server at the version Kubernetes itself pins (see go.sum).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
