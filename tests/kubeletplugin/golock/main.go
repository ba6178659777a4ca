// golock holds the lock Go's kubeletplugin helper takes around a prepare or unprepare
// during a rolling update (k8s.io/dynamic-resource-allocation v0.37.2,
// Helper.serializeGRPCIfEnabled): etcd's fileutil.LockFile on <path>, opened
// O_RDWR|O_CREATE with mode 0666. It prints "locked" once it holds the lock and keeps it
// until its standard input ends.
package main

import (
	"fmt"
	"io"
	"os"

	"go.etcd.io/etcd/client/pkg/v3/fileutil"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: golock <lock file>")
		os.Exit(2)
	}
	file, err := fileutil.LockFile(os.Args[1], os.O_RDWR|os.O_CREATE, 0666)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("locked")
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = file.Close()
}
