module oldlibcni08

go 1.25.0

require github.com/containernetworking/cni v0.8.1

require (
	github.com/onsi/ginkgo v1.16.5 // indirect
	github.com/onsi/gomega v1.44.0 // indirect
)
