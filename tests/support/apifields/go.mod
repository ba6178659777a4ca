module resourceslice/apifields

go 1.22
