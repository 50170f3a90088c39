// etcd as go.etcd.io/etcd/server/v3 builds it: etcd's own go.mod has replace
// directives, so `go install` refuses it; as a dependency of this module
// they do not apply (.ci/control-plane build).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
