module resourceslice/jsonlines

go 1.26.0
