module oldlibcni

go 1.21

require github.com/containernetworking/cni v1.1.2
