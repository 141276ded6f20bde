package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/ovnhost/ovnhost/internal/kubeclient"
	"github.com/ovnhost/ovnhost/internal/ovnpki"
)

// certs is `ovnhost certs`: create, if absent, the CA and the key pair of
// the OVN databases and their clients, and renew what has less than a
// third of its life left (docs/central.md, "Certificates"). A second run
// changes nothing. Exit 0 done or nothing to do, 1 the store could not be
// read or written, 2 bad flags or material ovnhost cannot use.
func certs(args, environ []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ovnhost certs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	dir := fs.String("dir", "", "write into this directory (the ssl-dir layout: cacert.pem, ovn-cert.pem, ovn-privkey.pem, and the CA's cakey.pem), e.g. /var/lib/ovn/pki")
	secret := fs.String("secret", "", "write into this Kubernetes Secret, NAMESPACE/NAME (keys cacert, cert, key as Kube-OVN's kube-ovn-tls, and cakey), e.g. ovnhost/ovnhost-ovn-tls")
	kubeconfig := fs.String("kubeconfig", env["KUBECONFIG"], "kubeconfig for --secret (default: in-cluster)")
	var dns, ips multiFlag
	fs.Var(&dns, "dns", "a DNS name the certificate names (repeat or comma-separate)")
	fs.Var(&ips, "ip", "an IP address the certificate names (repeat or comma-separate; default: OVN_DB_IPS)")
	cn := fs.String("common-name", ovnpki.DefaultCommonName, "subject common name of the certificate")
	caValidity := fs.Duration("ca-validity", ovnpki.DefaultCAValidity, "lifetime of a new CA")
	certValidity := fs.Duration("cert-validity", ovnpki.DefaultCertValidity, "lifetime of a new certificate (renewed by a run in its last third)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitConfig
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "ovnhost certs: "+format+"\n", a...)
		return exitConfig
	}
	if fs.NArg() > 0 {
		return bad("unexpected argument %q; fix: settings are flags, see `ovnhost certs --help`", fs.Arg(0))
	}
	if (*dir == "") == (*secret == "") {
		return bad("give exactly one of --dir and --secret; fix: --dir=/var/lib/ovn/pki for a host, --secret=ovnhost/ovnhost-ovn-tls in a cluster")
	}
	if *caValidity <= 0 || *certValidity <= 0 || *certValidity > *caValidity {
		return bad("--cert-validity=%s --ca-validity=%s: both must be positive and the certificate's at most the CA's", *certValidity, *caValidity)
	}
	if len(ips) == 0 && env["OVN_DB_IPS"] != "" {
		ips = append(ips, env["OVN_DB_IPS"])
	}
	o := ovnpki.Options{CommonName: *cn, CAValidity: *caValidity, CertValidity: *certValidity}
	for _, v := range dns {
		for _, d := range strings.Split(v, ",") {
			if d = strings.TrimSpace(d); d != "" {
				o.DNS = append(o.DNS, d)
			}
		}
	}
	for _, v := range ips {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			ip := net.ParseIP(s)
			if ip == nil {
				return bad("--ip (or OVN_DB_IPS) %q is not an IP address; fix: give addresses such as 10.0.0.1 or fd00::1, and names with --dns", s)
			}
			o.IPs = append(o.IPs, ip)
		}
	}

	var store ovnpki.Store
	if *dir != "" {
		store = ovnpki.Dir(*dir)
	} else {
		ns, name, ok := strings.Cut(*secret, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return bad("--secret=%q is not NAMESPACE/NAME; fix: e.g. --secret=ovnhost/ovnhost-ovn-tls (or kube-system/kube-ovn-tls to reuse Kube-OVN's)", *secret)
		}
		rc, err := kubeclient.Required(*kubeconfig)
		if err != nil {
			return bad("--secret needs Kubernetes: %v; fix: run it in a pod or give --kubeconfig", err)
		}
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return bad("--kubeconfig: %v", err)
		}
		store = &ovnpki.Secret{Client: cs, Namespace: ns, Name: name}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := ovnpki.Ensure(ctx, store, o)
	if err != nil {
		fmt.Fprintln(stderr, "ovnhost certs:", err)
		var ie *ovnpki.InputError
		if errors.As(err, &ie) {
			return exitConfig
		}
		return exitFailure
	}
	day := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	switch {
	case res.CreatedCA:
		fmt.Fprintf(stdout, "%s: created a CA (valid until %s) and a certificate (valid until %s; renewed by a run after %s)\n", store, day(res.CANotAfter), day(res.CertNotAfter), day(res.RenewAfter))
	case res.RenewedCA && res.IssuedCert:
		fmt.Fprintf(stdout, "%s: renewed the CA (valid until %s; the old CA stays trusted in cacert while valid) and the certificate (%s; valid until %s, renewed by a run after %s)\n", store, day(res.CANotAfter), res.Reason, day(res.CertNotAfter), day(res.RenewAfter))
	case res.RenewedCA:
		fmt.Fprintf(stdout, "%s: renewed the CA (valid until %s), added to cacert before the old one; the certificate keeps its old signer until its renewal after %s (valid until %s)\n", store, day(res.CANotAfter), day(res.RenewAfter), day(res.CertNotAfter))
	case res.IssuedCert:
		fmt.Fprintf(stdout, "%s: renewed the certificate (%s): valid until %s, renewed by a run after %s; CA valid until %s\n", store, res.Reason, day(res.CertNotAfter), day(res.RenewAfter), day(res.CANotAfter))
	default:
		fmt.Fprintf(stdout, "%s: nothing to do: certificate valid until %s (renewed by a run after %s), CA valid until %s\n", store, day(res.CertNotAfter), day(res.RenewAfter), day(res.CANotAfter))
	}
	return exitOK
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
