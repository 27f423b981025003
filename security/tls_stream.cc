#include "security/tls_stream.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>

#include <memory>

#include "security/secret_files.h"

namespace deepool::security {
namespace {

std::string OpenSslError() {
  const unsigned long code = ERR_get_error();
  if (code == 0) return "unknown OpenSSL error";
  char buffer[256];
  ERR_error_string_n(code, buffer, sizeof(buffer));
  ERR_clear_error();
  return buffer;
}

using SslContext = std::shared_ptr<SSL_CTX>;

// The peer's certificate in PEM, "" without one.
std::string PeerCertificatePem(SSL* ssl) {
  X509* cert = SSL_get1_peer_certificate(ssl);
  if (!cert) return "";
  std::string pem;
  BIO* bio = BIO_new(BIO_s_mem());
  if (bio && PEM_write_bio_X509(bio, cert) == 1) {
    char* data = nullptr;
    const long size = BIO_get_mem_data(bio, &data);
    if (size > 0) pem.assign(data, static_cast<size_t>(size));
  }
  BIO_free(bio);
  X509_free(cert);
  return pem;
}

class TlsStream final : public HttpStream {
 public:
  TlsStream(SslContext context, SSL* ssl, TlsClientCheck admit)
      : context_(std::move(context)), ssl_(ssl), admit_(std::move(admit)) {}
  ~TlsStream() override {
    SSL_shutdown(ssl_);  // best effort: the socket is non-blocking and about to close
    SSL_free(ssl_);
  }
  Io Handshake() override {
    const Io io = Result(SSL_do_handshake(ssl_));
    if (io.want != Want::kNothing || !admit_) return io;
    // Verified against the CA by the handshake; whether this client may be served is admit's.
    if (!admit_(PeerCertificatePem(ssl_)).ok()) return {0, Want::kClosed};
    return io;
  }
  Io Read(char* buffer, size_t size) override {
    return Result(SSL_read(ssl_, buffer, static_cast<int>(std::min<size_t>(size, 1 << 20))));
  }
  Io Write(const char* data, size_t size) override {
    return Result(SSL_write(ssl_, data, static_cast<int>(std::min<size_t>(size, 1 << 20))));
  }

 private:
  Io Result(int n) {
    if (n > 0) return {static_cast<size_t>(n), Want::kNothing};
    const int error = SSL_get_error(ssl_, n);
    ERR_clear_error();
    if (error == SSL_ERROR_WANT_READ) return {0, Want::kRead};
    if (error == SSL_ERROR_WANT_WRITE) return {0, Want::kWrite};
    if (n == 1) return {0, Want::kNothing};  // a finished handshake
    return {0, Want::kClosed};
  }
  SslContext context_;  // outlives the connection
  SSL* ssl_;
  TlsClientCheck admit_;  // null: every certificate the CA signed
};

}  // namespace

StatusOr<HttpStreamFactory> MakeTlsHttpStreams(const TlsFiles& files, TlsClientCheck admit) {
  if (files.ca.empty() || files.cert.empty() || files.key.empty()) {
    return InvalidArgumentError("TLS for the metrics endpoint needs the CA, certificate and key");
  }
  SslContext context(SSL_CTX_new(TLS_server_method()), SSL_CTX_free);
  if (!context) return InternalError("SSL_CTX_new: " + OpenSslError());
  SSL_CTX_set_min_proto_version(context.get(), TLS1_2_VERSION);
  if (SSL_CTX_use_certificate_chain_file(context.get(), files.cert.c_str()) != 1) {
    return InvalidArgumentError("certificate " + files.cert + ": " + OpenSslError());
  }
  RETURN_IF_ERROR(CheckSecretFileMode(files.key, "the private key (--tls-key)"));
  if (SSL_CTX_use_PrivateKey_file(context.get(), files.key.c_str(), SSL_FILETYPE_PEM) != 1) {
    return InvalidArgumentError("key " + files.key + ": " + OpenSslError());
  }
  if (SSL_CTX_check_private_key(context.get()) != 1) {
    return InvalidArgumentError("key " + files.key + " does not match " + files.cert);
  }
  if (SSL_CTX_load_verify_locations(context.get(), files.ca.c_str(), nullptr) != 1) {
    return InvalidArgumentError("CA " + files.ca + ": " + OpenSslError());
  }
  SSL_CTX_set_verify(context.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  SSL_CTX_set_mode(context.get(),
                   SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  return HttpStreamFactory([context, admit](int fd) -> StatusOr<std::unique_ptr<HttpStream>> {
    SSL* ssl = SSL_new(context.get());
    if (!ssl) return InternalError("SSL_new: " + OpenSslError());
    if (SSL_set_fd(ssl, fd) != 1) {
      SSL_free(ssl);
      return InternalError("SSL_set_fd: " + OpenSslError());
    }
    SSL_set_accept_state(ssl);
    return std::unique_ptr<HttpStream>(std::make_unique<TlsStream>(context, ssl, admit));
  });
}

}  // namespace deepool::security
