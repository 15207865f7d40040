// The etcd server at the version go.mod pins, built from the Go module proxy
// for the tests: etcd's own modules carry replace directives, so `go install`
// refuses them, while a module that merely requires them builds the same binary.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
