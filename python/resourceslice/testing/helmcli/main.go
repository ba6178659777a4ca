// Command helm is Helm's own command line, v4.3.2 (helm.sh/helm/v4/cmd/helm's main, built
// from the module this go.mod pins), for resourceslice.testing.helm: `helm lint` and
// `helm template` of the chart in deploy/chart, with Helm's own code. Nothing here talks to
// a cluster.
package main

import (
	"errors"
	"log/slog"
	"os"

	helmcmd "helm.sh/helm/v4/pkg/cmd"
	"helm.sh/helm/v4/pkg/kube"
)

func main() {
	// As helm's own main: the manager name of managedFields, whatever the binary is called.
	kube.ManagedFieldsManager = "helm"

	cmd, err := helmcmd.NewRootCmd(os.Stdout, os.Args[1:], helmcmd.SetupLogging)
	if err != nil {
		slog.Warn("command failed", slog.Any("error", err))
		os.Exit(1)
	}
	if err := cmd.Execute(); err != nil {
		if cerr, ok := errors.AsType[helmcmd.CommandError](err); ok {
			os.Exit(cerr.ExitCode)
		}
		os.Exit(1)
	}
}
