// TLS and bearer tokens on gRPC connections, for both ends.
// Server: with TlsFiles set, the coordinator serves TLS and asks every client for its certificate;
// the handshake proves the client holds the certificate's key, and the Authenticator
// (authenticator.h) checks the certificate against the cluster CA on every call. Checking it
// there rather than in the handshake lets a refusal name its reason to the client (another CA,
// expired) and the client's address in the coordinator's log, which gRPC does not report for a
// failed handshake; a connection whose certificate expires is refused from then on, too.
// Without TlsFiles it serves plain TCP.
// Client: with TlsFiles set, the channel presents its own certificate and accepts only a server
// whose certificate the CA signed for the coordinator: role kCoordinator and the name
// kCoordinatorTlsName (VerifyCoordinatorCertificate), so a user's or node's certificate from the
// same CA cannot pass for the coordinator. A token, when given, goes with every call as
// "authorization: Bearer ...".
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>

#include "common/status.h"

namespace deepool::security {

// PEM files: the cluster CA's certificate, this process's certificate and its private key.
struct TlsFiles {
  std::string ca;
  std::string cert;
  std::string key;
  // True when any of the three is set (then all three must be).
  bool configured() const { return !ca.empty() || !cert.empty() || !key.empty(); }
};

// Plain credentials when none of the files is set; an error naming the file that is missing or
// unreadable, or when only some are set; FAILED_PRECONDITION for a private key that group or
// others may read (secret_files.h). Client certificates are requested, not verified: the
// Authenticator does that, with ReadCaCertificates.
StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsFiles& files);

// The PEM text of files.ca (the cluster CA); an error naming the file when it cannot be read.
StatusOr<std::string> ReadCaCertificates(const TlsFiles& files);

struct ClientSecurity {
  TlsFiles tls;
  std::string token;  // "" for none
};

// FAILED_PRECONDITION when a token would travel in plaintext beyond this machine: a token
// without TLS to an address that is not loopback ("localhost", 127.x.y.z, ::1) or a Unix socket.
// Whoever can watch the network could otherwise replay it. An address it cannot parse counts
// as remote.
Status CheckTokenTransport(const std::string& address, const ClientSecurity& security);

// The gRPC target for a coordinator address: one as it is; several, comma-separated ("a:7070,
// b:7070": the coordinators sharing one PostgreSQL store, of which only the leader listens), one
// target of all of them (OpenChannel connects to each). Each host of a list is resolved now, to
// its first IPv4 address. INVALID_ARGUMENT for an unreadable list; UNAVAILABLE for a host that
// does not resolve.
StatusOr<std::string> CoordinatorTarget(const std::string& address);

// A channel to address (one, or a list: CoordinatorTarget) with the security above and the
// given arguments; refuses what CheckTokenTransport refuses, and a private key that group or
// others may read. A list's channel keeps a connection to, or keeps trying, every address at
// once and sends calls to those that answer (gRPC's round_robin policy), so a client or worker
// follows the leader: trying them in order (pick_first) would first wait out a silent former
// leader's connection attempt (20 s) before the standby that took over was tried.
StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const std::string& address,
                                                     const ClientSecurity& security,
                                                     grpc::ChannelArguments args);

// Why a connection failed in its TLS handshake, for people, from a failed call's gRPC message:
// "TLS handshake refused: " and the cause (the server's certificate is another CA's, expired, or
// a user's or node's rather than the coordinator's; the server does not speak TLS; the server
// refused this client's certificate); "" when the message shows no refused handshake.
std::string DescribeTlsRefusal(const std::string& grpc_message);

// A token file's first line, without surrounding white space; refuses an empty file, and one
// that group or others may read (FAILED_PRECONDITION, secret_files.h).
StatusOr<std::string> ReadTokenFile(const std::string& path);

// What a server call carries: the peer's certificate (PEM) when it presented one over TLS (with
// the rest of the chain it sent), and the bearer token of its "authorization" header ("" when
// none).
struct PeerCredentials {
  std::optional<std::string> certificate_pem;
  std::string certificate_chain_pem;
  std::string bearer_token;
  bool malformed_authorization = false;  // an authorization header that is not "Bearer <token>"
};
PeerCredentials PeerCredentialsOf(const grpc::ServerContext& context);

}  // namespace deepool::security
