// talos-apid-standin: a stand-in for a Talos node's API (apid in front of machined), NOT the
// real thing. It serves only MachineService.Reboot and reproduces, from siderolabs/talos
// v1.13.9, what a client of that API can observe:
//
//   - the mutual TLS of apid: a server certificate and client certificates issued by an Ed25519
//     Talos CA, client certificates verified against it, ALPN h2, TLS 1.3 at least
//     (internal/app/apid/pkg/provider/provider.go builds its config with
//     github.com/siderolabs/crypto/tls, whose defaults this uses);
//   - the roles taken from the client certificate's Organization
//     (pkg/grpc/middleware/authz/injector.go);
//   - apid's routing by the `node` and `nodes` metadata, and the errors it answers
//     (internal/app/apid/pkg/director/director.go, and the per-node error entries of
//     internal/app/apid/pkg/backend/apid.go);
//   - machined's authorization: the rules for Reboot, Shutdown and Upgrade and the Admin
//     fallback (internal/app/machined/pkg/system/services/machined.go), refused with authz's
//     ErrNotAuthorized (pkg/grpc/middleware/authz/authorizer.go);
//   - the talosconfig files Talos' ServiceAccount controller writes for a Kubernetes workload
//     (internal/app/machined/pkg/controllers/kubeaccess/serviceaccount/crd_controller.go),
//     built here with the same machinery calls at v1.13.0.
//
// The real component it stands in for is a Talos node, which the tests cannot run. Certificates
// and talosconfigs come from Talos' own machinery module, so their format is the real one; the
// routing and authorization are re-implemented (apid and machined are internal packages), and
// a forwarded request is acted on here rather than by another node's machined.
//
//	talos-apid-standin --dir DIR [--node ADDR]... [--hostname NAME] [--client NAME=ROLE[,ROLE...]]...
//	                   [--foreign-client NAME] [--reboot-error MSG] [--listen HOST:PORT]
//
// --listen ADDR (default 127.0.0.1:0) is where it serves: the e2e suite gives the host-only
// bridge's address, which pods reach. The server certificate names talos, talos.default,
// localhost, 127.0.0.1 and the listen address.
//
// DIR receives ca.crt, one talosconfig per client (0600), `addr` once it listens (HOST:PORT)
// and reboots.jsonl (one JSON line per node a Reboot acted on). It exits 0 on SIGTERM/SIGINT or
// when its stdin reaches EOF, so a test that dies takes it along; 2 on bad usage.
package main

import (
	"context"
	"crypto/rand"
	stdx509 "crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/siderolabs/crypto/tls"
	"github.com/siderolabs/crypto/x509"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// As the ServiceAccount controller: a 6 h client certificate in a context named "default" whose
// endpoint is the in-cluster Talos API service.
const (
	clientCertTTL  = 6 * time.Hour
	contextName    = "default"
	clientEndpoint = constants.KubernetesTalosAPIServiceName + "." + constants.KubernetesTalosAPIServiceNamespace
)

// rules are machined's entries for the methods this stand-in knows; any other method needs
// Admin (machined's FallbackRoles).
var (
	rules = map[string]role.Set{
		"/machine.MachineService/Reboot":   role.MakeSet(role.Admin, role.Operator),
		"/machine.MachineService/Shutdown": role.MakeSet(role.Admin, role.Operator),
		"/machine.MachineService/Upgrade":  role.MakeSet(role.Admin),
	}
	fallbackRoles = role.MakeSet(role.Admin)
)

// errNotAuthorized is authz.ErrNotAuthorized, word for word.
var errNotAuthorized = status.Error(codes.PermissionDenied, "not authorized")

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func usage(format string, args ...any) {
	if format != "" {
		fmt.Fprintf(os.Stderr, "talos-apid-standin: "+format+"\n", args...)
	}
	fmt.Fprintln(os.Stderr, "usage: talos-apid-standin --dir DIR [--node ADDR]... [--hostname NAME] "+
		"[--client NAME=ROLE[,ROLE...]]... [--foreign-client NAME] [--reboot-error MSG] [--listen HOST:PORT]")
	os.Exit(2)
}

func fatal(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "talos-apid-standin: "+format+"\n", args...)
	os.Exit(1)
}

// writeAtomic writes DIR/name through a temporary file and a rename, so that a test polling for
// the file never reads it half-written.
func writeAtomic(dir, name string, data []byte) error {
	tmp, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if err = tmp.Chmod(0o600); err == nil {
		if _, err = tmp.Write(data); err == nil {
			err = tmp.Sync()
		}
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, name))
}

// validClientName keeps client files inside DIR and off the names the stand-in writes itself.
func validClientName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsRune(name, '/') &&
		name != "ca.crt" && name != "addr" && name != "reboots.jsonl"
}

// talosconfig is what the ServiceAccount controller's generateTalosconfig returns for roles.
func talosconfig(ca *x509.PEMEncodedCertificateAndKey, roles role.Set) ([]byte, error) {
	cert, err := secrets.NewAdminCertificateAndKey(time.Now(), ca, roles, clientCertTTL)
	if err != nil {
		return nil, err
	}
	return clientconfig.NewConfig(contextName, []string{clientEndpoint}, ca.Crt, cert).Bytes()
}

// foreignTalosconfig trusts the real CA but presents a client certificate from another Talos CA
// (another cluster's, say): apid's handshake refuses it before any request is read.
func foreignTalosconfig(ca *x509.PEMEncodedCertificateAndKey) ([]byte, error) {
	other, err := secrets.NewTalosCA(time.Now())
	if err != nil {
		return nil, err
	}
	cert, err := secrets.NewAdminCertificateAndKey(time.Now(), x509.NewCertificateAndKeyFromCertificateAuthority(other),
		role.MakeSet(role.Admin), clientCertTTL)
	if err != nil {
		return nil, err
	}
	return clientconfig.NewConfig(contextName, []string{clientEndpoint}, ca.Crt, cert).Bytes()
}

// serverCert is apid's certificate as machined's secrets.APIController issues it on a control
// plane node, with SANs for the names a client of the stand-in dials.
func serverCert(ca *x509.CertificateAuthority, hostname string, listen net.IP) (*x509.KeyPair, error) {
	ips := []net.IP{net.ParseIP("127.0.0.1")}
	if listen != nil && !listen.IsLoopback() && !listen.IsUnspecified() {
		ips = append(ips, listen)
	}
	return x509.NewKeyPair(ca,
		x509.IPAddresses(ips),
		x509.DNSNames([]string{"talos", "talos.default", "localhost"}),
		x509.CommonName(hostname),
		x509.NotAfter(time.Now().Add(x509.DefaultCertificateValidityDuration)),
		x509.KeyUsage(stdx509.KeyUsageDigitalSignature),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}),
	)
}

type targetKey struct{}
type rolesKey struct{}

// standin holds the node's identity and the record of what it did.
type standin struct {
	dir         string
	hostname    string
	nodes       []string
	rebootError string

	mu sync.Mutex // serializes appends to reboots.jsonl
}

func (s *standin) known(target string) bool {
	return target == s.hostname || slices.Contains(s.nodes, target)
}

// dialError is what apid's proxy answers when the node behind `target` cannot be reached: the
// stand-in has no other node, so every node it was not told about is unreachable.
func dialError(target string) error {
	return status.Errorf(codes.Unavailable,
		"connection error: desc = \"transport: Error while dialing: dial tcp %s: connect: no route to host\"",
		net.JoinHostPort(target, fmt.Sprint(constants.ApidPort)))
}

// invalidTarget mirrors backend.NewAPID's check: an empty target or one with a port appended
// cannot become a backend, and the director answers Internal.
func invalidTarget(target string) error {
	_, _, err := net.SplitHostPort(target)
	if target == "" || err == nil {
		return status.Errorf(codes.Internal, "invalid target %q", target)
	}
	return nil
}

// peerRoles is the Injector in authz.Enabled mode: the verified client certificate's
// Organization, parsed. Unknown roles are kept, as role.Parse does.
func peerRoles(ctx context.Context) role.Set {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return role.MakeSet()
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return role.MakeSet()
	}
	roles, _ := role.Parse(info.State.PeerCertificates[0].Subject.Organization)
	return roles
}

// machined is what the target node's machined does with a request apid routed to it: its
// Authorizer, then the method.
func machined(ctx context.Context, target string, roles role.Set, req any, info *grpc.UnaryServerInfo,
	handler grpc.UnaryHandler) (any, error) {
	allowed, found := rules[info.FullMethod]
	if !found {
		allowed = fallbackRoles
	}
	if !allowed.IncludesAny(roles) {
		return nil, errNotAuthorized
	}
	ctx = context.WithValue(ctx, targetKey{}, target)
	ctx = context.WithValue(ctx, rolesKey{}, roles)
	return handler(ctx, req)
}

// apid routes a request as director.Director does, then hands it to the "machined" of each node
// it reaches. apid itself authorizes nothing: a refusal comes from the target's machined, after
// routing (so an unreachable node is Unavailable whatever the caller's roles).
func (s *standin) apid(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	roles := peerRoles(ctx)
	md, _ := metadata.FromIncomingContext(ctx)
	nodes, okNodes := md["nodes"]
	node, okNode := md["node"]

	resp, outcome, err := func() (any, string, error) {
		if okNode && len(node) != 1 {
			return nil, "", status.Error(codes.InvalidArgument, "node metadata must be single-valued")
		}
		switch {
		case okNodes:
			return s.oneToMany(ctx, nodes, roles, req, info, handler)
		case okNode:
			if err := invalidTarget(node[0]); err != nil {
				return nil, "", err
			}
			if !s.known(node[0]) {
				return nil, "", dialError(node[0])
			}
			resp, err := machined(ctx, node[0], roles, req, info, handler)
			return resp, "", err
		default:
			resp, err := machined(ctx, s.hostname, roles, req, info, handler)
			return resp, "", err
		}
	}()
	if outcome == "" {
		outcome = "OK"
		if err != nil {
			st := status.Convert(err)
			outcome = fmt.Sprintf("%s %q", st.Code(), st.Message())
		}
	}
	fmt.Fprintf(os.Stderr, "talos-apid-standin: %s roles=%v node=%v nodes=%v -> %s\n",
		info.FullMethod, roles.Strings(), node, nodes, outcome)
	return resp, err
}

// oneToMany is apid's one-2-many mode: one reply entry per target, the failures among them
// carried in the entry's metadata (backend.APID.BuildError) while the call itself succeeds.
func (s *standin) oneToMany(ctx context.Context, targets []string, roles role.Set, req any,
	info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, string, error) {
	// The director's list of services that support one-2-many.
	supported := false
	for _, prefix := range []string{"/machine.MachineService/", "/cluster.ClusterService/",
		"/inspect.InspectService/", "/storage.StorageService/", "/time.TimeService/"} {
		supported = supported || strings.HasPrefix(info.FullMethod, prefix)
	}
	if !supported {
		return nil, "", status.Errorf(codes.InvalidArgument, "one-2-many proxying is not supported for method %s",
			info.FullMethod)
	}
	for _, t := range targets {
		if err := invalidTarget(t); err != nil {
			return nil, "", err
		}
	}
	// Aggregation needs the reply's type; only Reboot is served, so only its replies are built.
	if info.FullMethod != "/machine.MachineService/Reboot" {
		return nil, "", status.Errorf(codes.Unimplemented, "the stand-in aggregates only Reboot, not %s", info.FullMethod)
	}
	reply := &machine.RebootResponse{}
	var outcomes []string
	for _, t := range targets {
		var err error
		if !s.known(t) {
			err = dialError(t)
		} else {
			var resp any
			resp, err = machined(ctx, t, roles, req, info, handler)
			if err == nil {
				for _, m := range resp.(*machine.RebootResponse).GetMessages() {
					m.Metadata = &common.Metadata{Hostname: t}
					reply.Messages = append(reply.Messages, m)
				}
				outcomes = append(outcomes, t+": OK")
				continue
			}
		}
		reply.Messages = append(reply.Messages, &machine.Reboot{Metadata: &common.Metadata{
			Hostname: t,
			Error:    err.Error(),
			Status:   status.Convert(err).Proto(),
		}})
		outcomes = append(outcomes, fmt.Sprintf("%s: %s %q", t, status.Code(err), status.Convert(err).Message()))
	}
	return reply, "OK [" + strings.Join(outcomes, "; ") + "]", nil
}

// machineService is machined's MachineService; only Reboot does anything.
type machineService struct {
	machine.UnimplementedMachineServiceServer
	s *standin
}

type rebootRecord struct {
	Node    string   `json:"node"`
	Mode    string   `json:"mode"`
	Roles   []string `json:"roles"`
	ActorID string   `json:"actor_id"`
}

// Reboot records the reboot a node would start and answers as machined does: an actor id and
// no metadata (apid adds the node's name only in one-2-many mode).
func (m *machineService) Reboot(ctx context.Context, in *machine.RebootRequest) (*machine.RebootResponse, error) {
	if m.s.rebootError != "" {
		// What machined answers when it cannot start the reboot sequence.
		return nil, status.Error(codes.FailedPrecondition, m.s.rebootError)
	}
	target, _ := ctx.Value(targetKey{}).(string)
	roles, _ := ctx.Value(rolesKey{}).(role.Set)
	actorID, err := uuid()
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := m.s.record(rebootRecord{Node: target, Mode: in.GetMode().String(), Roles: roles.Strings(), ActorID: actorID}); err != nil {
		return nil, status.Errorf(codes.Internal, "recording the reboot: %v", err)
	}
	return &machine.RebootResponse{Messages: []*machine.Reboot{{ActorId: actorID}}}, nil
}

// record appends one line to reboots.jsonl and syncs it, so a test that reads the file after the
// reply sees the reboot even if the stand-in is killed next.
func (s *standin) record(r rebootRecord) error {
	if r.Roles == nil {
		r.Roles = []string{}
	}
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := os.OpenFile(filepath.Join(s.dir, "reboots.jsonl"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if _, err = f.Write(append(line, '\n')); err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// uuid is a random version-4 UUID, the form of machined's actor ids.
func uuid() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

func main() {
	var nodes, clients multiFlag
	dir := flag.String("dir", "", "where to write the CA, the talosconfigs, addr and reboots.jsonl (required)")
	flag.Var(&nodes, "node", "a node apid can forward to (repeatable)")
	hostname := flag.String("hostname", "controlplane-1", "the answering node's own name")
	flag.Var(&clients, "client", "NAME=ROLE[,ROLE...]: write DIR/NAME, a talosconfig with these roles (repeatable; default config=os:operator)")
	foreign := flag.String("foreign-client", "", "write DIR/NAME, a talosconfig whose client certificate another CA signed")
	rebootError := flag.String("reboot-error", "", "Reboot on a known node fails with FailedPrecondition and this message")
	listen := flag.String("listen", "127.0.0.1:0", "HOST:PORT to serve on")
	flag.Usage = func() { usage("") }
	flag.Parse()
	if flag.NArg() > 0 {
		usage("unexpected argument %q", flag.Arg(0))
	}
	if *dir == "" {
		usage("--dir is required")
	}
	if len(clients) == 0 {
		clients = multiFlag{"config=os:operator"}
	}
	type client struct {
		name  string
		roles role.Set
	}
	var parsed []client
	for _, c := range clients {
		name, list, ok := strings.Cut(c, "=")
		if !ok || !validClientName(name) {
			usage("--client %q: want NAME=ROLE[,ROLE...] with a plain file name", c)
		}
		var names []string
		if list != "" {
			names = strings.Split(list, ",")
		}
		roles, unknown := role.Parse(names)
		if len(unknown) > 0 {
			// Kept, as role.Parse keeps them: a certificate from a newer Talos may carry them.
			fmt.Fprintf(os.Stderr, "talos-apid-standin: --client %s: roles unknown to Talos v1.13: %v\n", name, unknown)
		}
		parsed = append(parsed, client{name, roles})
	}
	if *foreign != "" && !validClientName(*foreign) {
		usage("--foreign-client %q: want a plain file name", *foreign)
	}
	for _, n := range nodes {
		if n == "" {
			usage("--node needs an address")
		}
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		fatal("%v", err)
	}

	ca, err := secrets.NewTalosCA(time.Now())
	if err != nil {
		fatal("generating the Talos CA: %v", err)
	}
	caPEM := x509.NewCertificateAndKeyFromCertificateAuthority(ca)
	if err := writeAtomic(*dir, "ca.crt", caPEM.Crt); err != nil {
		fatal("%v", err)
	}
	for _, c := range parsed {
		cfg, err := talosconfig(caPEM, c.roles)
		if err != nil {
			fatal("talosconfig %s: %v", c.name, err)
		}
		if err := writeAtomic(*dir, c.name, cfg); err != nil {
			fatal("%v", err)
		}
	}
	if *foreign != "" {
		cfg, err := foreignTalosconfig(caPEM)
		if err != nil {
			fatal("talosconfig %s: %v", *foreign, err)
		}
		if err := writeAtomic(*dir, *foreign, cfg); err != nil {
			fatal("%v", err)
		}
	}

	listenHost, _, err := net.SplitHostPort(*listen)
	if err != nil {
		usage("--listen %q is not HOST:PORT", *listen)
	}
	server, err := serverCert(ca, *hostname, net.ParseIP(listenHost))
	if err != nil {
		fatal("server certificate: %v", err)
	}
	// apid's server config (provider.ServerConfig): siderolabs/crypto's tls.New with mutual
	// authentication against the Talos CA. Its defaults are TLS 1.3 at least, ALPN h2 and no
	// session tickets, so a client that a real node would refuse is refused here too.
	tlsConfig, err := tls.New(
		tls.WithClientAuthType(tls.Mutual),
		tls.WithCACertPEM(caPEM.Crt),
		tls.WithKeypair(*server.Certificate),
	)
	if err != nil {
		fatal("TLS configuration: %v", err)
	}

	s := &standin{dir: *dir, hostname: *hostname, nodes: nodes, rebootError: *rebootError}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(tlsConfig)), grpc.UnaryInterceptor(s.apid))
	machine.RegisterMachineServiceServer(srv, &machineService{s: s})

	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		fatal("listening: %v", err)
	}
	addr := lis.Addr().String()
	if err := writeAtomic(*dir, "addr", []byte(addr)); err != nil {
		fatal("%v", err)
	}
	fmt.Printf("listening on %s\n", addr)

	done := make(chan string, 3)
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		done <- (<-sig).String()
	}()
	go func() {
		// The test holds our stdin; when it exits, however it dies, the pipe closes.
		_, _ = io.Copy(io.Discard, os.Stdin)
		done <- "stdin closed"
	}()
	go func() {
		if err := srv.Serve(lis); err != nil {
			fatal("serving: %v", err)
		}
	}()
	why := <-done
	fmt.Fprintf(os.Stderr, "talos-apid-standin: %s, exiting\n", why)
	srv.Stop()
}
