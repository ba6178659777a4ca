module resourceslice/runtime/reporter

go 1.26.0
