#include "talos/machine_client.h"

#include <grpcpp/create_channel_posix.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "kube/tls_transport.h"
#include "proto/talos/machine/machine.grpc.pb.h"
#include "talos/talosconfig.h"

namespace gpulet::talos {
namespace {

// The roles Talos lets call Reboot (machined.go's rules: role.Admin, role.Operator).
constexpr const char* kRebootRoles[] = {"os:admin", "os:operator"};

constexpr char kGrantRole[] =
    "give the talos.dev ServiceAccount spec.roles [os:operator], and allow os:operator and "
    "gpulet's namespace in the machine config's machine.features.kubernetesTalosAPIAccess "
    "(docs/remediation.md)";

std::string Endpoint(const std::string& host, int port) {
  return absl::StrCat(host.find(':') != std::string::npos ? absl::StrCat("[", host, "]") : host,
                      ":", port);
}

}  // namespace

std::string MachineApiRebooter::Describe() const {
  return absl::StrCat("Talos' machine API (",
                      options_.dial.empty() ? "talosconfig " + options_.talosconfig : options_.dial,
                      ", node ", options_.node.empty() ? "unknown" : options_.node, ")");
}

absl::Status MachineApiRebooter::Reboot(absl::string_view why, absl::string_view /*reason*/) {
  if (options_.node.empty()) {
    return absl::FailedPreconditionError(
        "gpulet does not know this node's address for Talos' API (GPULET_NODE_IP, the pod's "
        "status.hostIP): without it apid would reboot whichever node answered; deploy "
        "gpulet with deploy/reboot-talos");
  }
  absl::StatusOr<Talosconfig> config = ReadTalosconfig(options_.talosconfig);
  if (!config.ok()) {
    if (absl::IsNotFound(config.status())) {
      return absl::FailedPreconditionError(absl::StrCat(
          config.status().message(),
          ": Talos writes it for a talos.dev ServiceAccount; create one (deploy/reboot-talos) "
          "and mount its Secret there"));
    }
    return absl::FailedPreconditionError(config.status().message());
  }
  const std::vector<std::string> roles = CertificateRoles(config->crt_pem);
  if (std::none_of(roles.begin(), roles.end(), [](const std::string& r) {
        return std::find(std::begin(kRebootRoles), std::end(kRebootRoles), r) !=
               std::end(kRebootRoles);
      })) {
    return absl::PermissionDeniedError(
        absl::StrCat("the certificate in talosconfig ", options_.talosconfig,
                     " carries the roles [", absl::StrJoin(roles, ", "),
                     "], and Talos allows Reboot only to os:operator or "
                     "os:admin: ",
                     kGrantRole));
  }
  kube::TlsTransportOptions tls;
  tls.peer = "Talos' API";
  tls.alpn = "h2";
  tls.host = config->host;
  tls.port = config->port;
  if (!options_.dial.empty()) {
    // host:port, [v6]:port
    const size_t colon = options_.dial.rfind(':');
    int port = 0;
    if (colon == std::string::npos || !absl::SimpleAtoi(options_.dial.substr(colon + 1), &port)) {
      return absl::FailedPreconditionError(
          absl::StrCat("the Talos API address '", options_.dial, "' is not host:port"));
    }
    std::string host = options_.dial.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    tls.host = host;
    tls.port = port;
  }
  tls.server_name = config->host;  // the name apid's certificate carries
  tls.ca_pem = config->ca_pem;
  tls.ca_source = absl::StrCat("talosconfig ", options_.talosconfig);
  tls.client_cert_pem = config->crt_pem;
  tls.client_key_pem = config->key_pem;
  absl::StatusOr<std::unique_ptr<kube::TlsTransport>> transport =
      kube::TlsTransport::Create(std::move(tls));
  if (!transport.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("talosconfig ", options_.talosconfig, ": ", transport.status().message()));
  }
  absl::StatusOr<std::unique_ptr<kube::TlsTunnel>> tunnel =
      (*transport)->OpenTunnel(options_.timeout);
  if (!tunnel.ok()) return tunnel.status();
  const std::string endpoint = Endpoint(config->host, config->port);
  grpc::ChannelArguments args;
  args.SetString(GRPC_ARG_DEFAULT_AUTHORITY, endpoint);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomInsecureChannelFromFd(endpoint, (*tunnel)->TakePlainFd(), args);
  std::unique_ptr<machine::MachineService::Stub> stub = machine::MachineService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(options_.timeout));
  ctx.AddMetadata("node", options_.node);
  machine::RebootRequest request;
  request.set_mode(options_.mode == RebootMode::kPowercycle ? machine::RebootRequest::POWERCYCLE
                                                            : machine::RebootRequest::DEFAULT);
  machine::RebootResponse response;
  GPULET_LOG_INFO("asking Talos' API at {} to reboot node {}: {}", endpoint, options_.node, why);
  const grpc::Status status = stub->Reboot(&ctx, request, &response);
  const std::string where = absl::StrCat("Talos' API at ", endpoint, " (node ", options_.node, ")");
  if (!status.ok()) {
    const std::string said = absl::StrCat(where, " refused the reboot: ", status.error_message());
    switch (status.error_code()) {
      case grpc::StatusCode::PERMISSION_DENIED:
        return absl::PermissionDeniedError(absl::StrCat(
            said, " (the certificate's roles: ", absl::StrJoin(roles, ", "), "); ", kGrantRole));
      case grpc::StatusCode::UNAVAILABLE:
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        if (const std::string ended = (*tunnel)->EndedBy(); !ended.empty()) {
          // Talos refuses a client certificate in an alert after the handshake (TLS 1.3).
          return absl::FailedPreconditionError(absl::StrCat(
              where, " ended the connection: ", ended, "; the certificate in talosconfig ",
              options_.talosconfig,
              " is not one this cluster's Talos accepts (a talosconfig from another cluster, or "
              "a Talos CA that changed since): delete the talos.dev ServiceAccount's Secret so "
              "that Talos writes it anew"));
        }
        return absl::UnavailableError(absl::StrCat(
            where, " could not be reached or could not reach the node: ", status.error_message(),
            "; gpulet asks again later"));
      case grpc::StatusCode::UNIMPLEMENTED:
        return absl::FailedPreconditionError(
            absl::StrCat(said, "; the server there does not serve Talos' machine API"));
      default:
        return absl::FailedPreconditionError(said);
    }
  }
  for (const machine::Reboot& r : response.messages()) {
    if (!r.metadata().error().empty()) {
      return absl::UnavailableError(
          absl::StrCat(where, " answered for ",
                       r.metadata().hostname().empty() ? options_.node : r.metadata().hostname(),
                       ": ", r.metadata().error()));
    }
  }
  return absl::OkStatus();
}

}  // namespace gpulet::talos
