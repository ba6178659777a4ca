module golock

go 1.26.0

require go.etcd.io/etcd/client/pkg/v3 v3.7.0

require (
	go.uber.org/multierr v1.11.0 // indirect
	go.uber.org/zap v1.27.1 // indirect
	golang.org/x/sys v0.47.0 // indirect
)
