#include "security/certificates.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cctype>
#include <ctime>
#include <memory>

namespace deepool::security {
namespace {

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using X509Ptr = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using BioPtr = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using ExtensionPtr = std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION, X509_EXTENSION_free>>;
using BignumPtr = std::unique_ptr<BIGNUM, Deleter<BIGNUM, BN_free>>;
using StorePtr = std::unique_ptr<X509_STORE, Deleter<X509_STORE, X509_STORE_free>>;
using StoreContextPtr =
    std::unique_ptr<X509_STORE_CTX, Deleter<X509_STORE_CTX, X509_STORE_CTX_free>>;
void FreeCertificates(STACK_OF(X509) * stack) { sk_X509_pop_free(stack, X509_free); }
using CertificateStackPtr =
    std::unique_ptr<STACK_OF(X509), Deleter<STACK_OF(X509), FreeCertificates>>;

// The last OpenSSL error, for messages ("" when the queue is empty).
std::string OpenSslError() {
  const unsigned long code = ERR_get_error();
  if (code == 0) return "unknown OpenSSL error";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  ERR_clear_error();
  return text;
}

Status Failed(const std::string& what) { return InternalError(what + ": " + OpenSslError()); }

StatusOr<KeyPtr> NewKey() {
  KeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return Failed("generating a P-256 key");
  return key;
}

Status SetRandomSerial(X509* cert) {
  BignumPtr serial(BN_new());
  // 127 random bits: positive, unique in practice, well under RFC 5280's 20-octet limit.
  if (!serial || BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      !BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert))) {
    return Failed("choosing a serial number");
  }
  return Status::Ok();
}

Status AddNameEntry(X509_NAME* name, const char* field, const std::string& value) {
  if (X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(value.c_str()), -1, -1,
                                 0) != 1) {
    return Failed(std::string("setting the subject's ") + field);
  }
  return Status::Ok();
}

Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  ExtensionPtr ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) {
    return Failed(std::string("adding the extension ") + OBJ_nid2sn(nid) + " = " + value);
  }
  return Status::Ok();
}

StatusOr<std::string> CertificatePem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return Failed("writing a certificate");
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

StatusOr<std::string> PrivateKeyPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio ||
      PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return Failed("writing a private key");
  }
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

StatusOr<X509Ptr> ParseCertificate(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  X509Ptr cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!cert) return InvalidArgumentError("not a PEM certificate: " + OpenSslError());
  return cert;
}

StatusOr<KeyPtr> ParsePrivateKey(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  KeyPtr key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!key) return InvalidArgumentError("not a PEM private key: " + OpenSslError());
  return key;
}

// Every certificate in a PEM text (a bundle); none for text without one.
CertificateStackPtr ParseCertificates(const std::string& pem) {
  CertificateStackPtr stack(sk_X509_new_null());
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!stack || !bio) return stack;
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    if (sk_X509_push(stack.get(), cert) <= 0) X509_free(cert);
  }
  ERR_clear_error();  // the end of the text reads as an error
  return stack;
}

// "2025-01-31 12:00:00 UTC".
std::string TimeText(const ASN1_TIME* time) {
  struct tm parts {};
  if (time == nullptr || ASN1_TIME_to_tm(time, &parts) != 1) return "an unreadable time";
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S UTC", &parts);
  return text;
}

std::string NameText(X509_NAME* name) {
  char text[256];
  X509_NAME_oneline(name, text, sizeof(text));
  return text;
}

// A certificate with its key, subject, serial and validity set, not yet signed.
StatusOr<X509Ptr> NewCertificate(EVP_PKEY* key, const std::string& common_name,
                                 const std::string& unit, std::chrono::seconds not_before_offset,
                                 std::chrono::seconds valid_for) {
  X509Ptr cert(X509_new());
  if (!cert || X509_set_version(cert.get(), X509_VERSION_3) != 1) {
    return Failed("creating a certificate");
  }
  RETURN_IF_ERROR(SetRandomSerial(cert.get()));
  const long from = static_cast<long>(not_before_offset.count());
  if (!X509_gmtime_adj(X509_getm_notBefore(cert.get()), from) ||
      !X509_gmtime_adj(X509_getm_notAfter(cert.get()),
                       from + static_cast<long>(valid_for.count()))) {
    return Failed("setting the validity");
  }
  X509_NAME* subject = X509_get_subject_name(cert.get());
  RETURN_IF_ERROR(AddNameEntry(subject, "O", "deepool"));
  RETURN_IF_ERROR(AddNameEntry(subject, "OU", unit));
  RETURN_IF_ERROR(AddNameEntry(subject, "CN", common_name));
  if (X509_set_pubkey(cert.get(), key) != 1) return Failed("setting the public key");
  return cert;
}

StatusOr<KeyAndCertificate> Finish(X509* cert, EVP_PKEY* key, EVP_PKEY* signing_key) {
  if (X509_sign(cert, signing_key, EVP_sha256()) <= 0) return Failed("signing the certificate");
  KeyAndCertificate out;
  ASSIGN_OR_RETURN(out.certificate_pem, CertificatePem(cert));
  ASSIGN_OR_RETURN(out.private_key_pem, PrivateKeyPem(key));
  return out;
}

std::string SubjectAltNames(const CertificateRequest& request) {
  std::string names;
  auto add = [&names](const std::string& entry) {
    if (!names.empty()) names += ",";
    names += entry;
  };
  if (request.role == Role::kCoordinator) add(std::string("DNS:") + kCoordinatorTlsName);
  for (const std::string& dns : request.dns_names) add("DNS:" + dns);
  for (const std::string& ip : request.ip_addresses) add("IP:" + ip);
  return names;
}

Status CheckPlainValue(const std::string& what, const std::string& value) {
  if (value.empty() || value.size() > 64) {
    return InvalidArgumentError(what + ": must be 1 to 64 characters");
  }
  for (char c : value) {
    const bool plain =
        std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == ':';
    if (!plain) {
      return InvalidArgumentError(what + " '" + value +
                                  "': use letters, digits, '-', '_', '.' and ':' only");
    }
  }
  return Status::Ok();
}

// Whether a name would pass for kCoordinatorTlsName in a TLS client's host name check, which
// ignores case and a trailing dot.
bool IsCoordinatorName(std::string name) {
  while (!name.empty() && name.back() == '.') name.pop_back();
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name == kCoordinatorTlsName;
}

// Clients accept any certificate from the cluster CA that bears the coordinator's name (as its
// DNS name, or as its CN when it has none), whatever its role: a node or a user certificate so
// named could stand in for the coordinator and collect every client's token.
Status CheckNotCoordinatorName(const CertificateRequest& request) {
  if (request.role == Role::kCoordinator) return Status::Ok();
  std::vector<std::string> names = request.dns_names;
  names.push_back(request.common_name);
  for (const std::string& name : names) {
    if (IsCoordinatorName(name)) {
      return InvalidArgumentError(std::string("the name ") + kCoordinatorTlsName +
                                  " belongs to the coordinator: a " + RoleName(request.role) +
                                  " certificate so named could impersonate it; choose another "
                                  "name");
    }
  }
  return Status::Ok();
}

}  // namespace

std::string RoleUnit(Role role) { return std::string("deepool-") + RoleName(role); }

StatusOr<KeyAndCertificate> IssueCertificateAuthority(const std::string& name,
                                                      std::chrono::seconds valid_for) {
  RETURN_IF_ERROR(CheckPlainValue("CA name", name));
  ASSIGN_OR_RETURN(KeyPtr key, NewKey());
  ASSIGN_OR_RETURN(X509Ptr cert, NewCertificate(key.get(), "deepool CA " + name, "deepool-ca",
                                                std::chrono::seconds(-300), valid_for));
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get())) != 1) {
    return Failed("setting the issuer");
  }
  RETURN_IF_ERROR(AddExtension(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE"));
  RETURN_IF_ERROR(
      AddExtension(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign"));
  RETURN_IF_ERROR(AddExtension(cert.get(), cert.get(), NID_subject_key_identifier, "hash"));
  return Finish(cert.get(), key.get(), key.get());
}

StatusOr<KeyAndCertificate> IssueCertificate(const KeyAndCertificate& ca,
                                             const CertificateRequest& request) {
  RETURN_IF_ERROR(CheckPlainValue("certificate name", request.common_name));
  for (const std::string& dns : request.dns_names)
    RETURN_IF_ERROR(CheckPlainValue("DNS name", dns));
  for (const std::string& ip : request.ip_addresses) {
    RETURN_IF_ERROR(CheckPlainValue("IP address", ip));
  }
  RETURN_IF_ERROR(CheckNotCoordinatorName(request));
  ASSIGN_OR_RETURN(X509Ptr ca_cert, ParseCertificate(ca.certificate_pem));
  ASSIGN_OR_RETURN(KeyPtr ca_key, ParsePrivateKey(ca.private_key_pem));
  if (X509_check_private_key(ca_cert.get(), ca_key.get()) != 1) {
    return InvalidArgumentError("the CA key does not belong to the CA certificate");
  }
  ASSIGN_OR_RETURN(KeyPtr key, NewKey());
  ASSIGN_OR_RETURN(X509Ptr cert,
                   NewCertificate(key.get(), request.common_name, RoleUnit(request.role),
                                  request.not_before_offset, request.valid_for));
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert.get())) != 1) {
    return Failed("setting the issuer");
  }
  X509* ca_raw = ca_cert.get();
  RETURN_IF_ERROR(AddExtension(cert.get(), ca_raw, NID_basic_constraints, "critical,CA:FALSE"));
  RETURN_IF_ERROR(
      AddExtension(cert.get(), ca_raw, NID_key_usage, "critical,digitalSignature,keyAgreement"));
  RETURN_IF_ERROR(AddExtension(cert.get(), ca_raw, NID_ext_key_usage, "serverAuth,clientAuth"));
  RETURN_IF_ERROR(AddExtension(cert.get(), ca_raw, NID_subject_key_identifier, "hash"));
  RETURN_IF_ERROR(AddExtension(cert.get(), ca_raw, NID_authority_key_identifier, "keyid:always"));
  const std::string alt_names = SubjectAltNames(request);
  if (!alt_names.empty()) {
    RETURN_IF_ERROR(AddExtension(cert.get(), ca_raw, NID_subject_alt_name, alt_names));
  }
  return Finish(cert.get(), key.get(), ca_key.get());
}

StatusOr<CertificateIdentity> ReadCertificateIdentity(const std::string& certificate_pem) {
  ASSIGN_OR_RETURN(X509Ptr cert, ParseCertificate(certificate_pem));
  X509_NAME* subject = X509_get_subject_name(cert.get());
  auto field = [subject](int nid) -> std::string {
    char text[256];
    const int n = X509_NAME_get_text_by_NID(subject, nid, text, sizeof(text));
    return n > 0 ? std::string(text, static_cast<size_t>(n)) : std::string();
  };
  CertificateIdentity identity;
  identity.common_name = field(NID_commonName);
  const std::string unit = field(NID_organizationalUnitName);
  const std::string prefix = "deepool-";
  std::optional<Role> role;
  if (unit.rfind(prefix, 0) == 0) role = RoleFromName(unit.substr(prefix.size()));
  if (!role) {
    return PermissionDeniedError("the certificate's OU '" + unit +
                                 "' names no deepool role (deepool-user, deepool-admin, "
                                 "deepool-worker, deepool-coordinator)");
  }
  if (identity.common_name.empty()) return PermissionDeniedError("the certificate has no CN");
  identity.role = *role;
  struct tm after {};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert.get()), &after) == 1) {
    identity.not_after_unix_s = static_cast<int64_t>(timegm(&after));
  }
  return identity;
}

StatusOr<CertificateIdentity> VerifyCertificate(const std::string& ca_pem,
                                                const std::string& certificate_pem,
                                                CertificateUse use, int64_t now_unix_s,
                                                const std::string& chain_pem) {
  ASSIGN_OR_RETURN(X509Ptr cert, ParseCertificate(certificate_pem));
  CertificateStackPtr authorities = ParseCertificates(ca_pem);
  if (!authorities || sk_X509_num(authorities.get()) == 0) {
    return InvalidArgumentError("the CA file holds no PEM certificate");
  }
  StorePtr store(X509_STORE_new());
  if (!store) return Failed("creating a certificate store");
  for (int i = 0; i < sk_X509_num(authorities.get()); ++i) {
    if (X509_STORE_add_cert(store.get(), sk_X509_value(authorities.get(), i)) != 1) {
      return Failed("adding a CA certificate");
    }
  }
  CertificateStackPtr untrusted = ParseCertificates(chain_pem);
  StoreContextPtr context(X509_STORE_CTX_new());
  if (!context ||
      X509_STORE_CTX_init(context.get(), store.get(), cert.get(), untrusted.get()) != 1) {
    return Failed("preparing to verify a certificate");
  }
  X509_STORE_CTX_set_time(context.get(), 0, static_cast<time_t>(now_unix_s));
  X509_STORE_CTX_set_purpose(context.get(), use == CertificateUse::kServer
                                                ? X509_PURPOSE_SSL_SERVER
                                                : X509_PURPOSE_SSL_CLIENT);
  // Who it names, for the messages below (the subject of a refused certificate is its claim).
  const std::string holder = NameText(X509_get_subject_name(cert.get()));
  if (X509_verify_cert(context.get()) != 1) {
    const int error = X509_STORE_CTX_get_error(context.get());
    const int depth = X509_STORE_CTX_get_error_depth(context.get());
    ERR_clear_error();
    const std::string whose = depth == 0 ? "the certificate " + holder : "its CA's certificate";
    // The certificate the check failed on: the leaf, or its CA at depth 1.
    const X509* failed = X509_STORE_CTX_get_current_cert(context.get());
    if (failed == nullptr) failed = cert.get();
    switch (error) {
      case X509_V_ERR_CERT_HAS_EXPIRED:
        return UnauthenticatedError(whose + " expired at " + TimeText(X509_get0_notAfter(failed)));
      case X509_V_ERR_CERT_NOT_YET_VALID:
        return UnauthenticatedError(whose + " is not valid before " +
                                    TimeText(X509_get0_notBefore(failed)) + " (check the clocks)");
      case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
      case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
      case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
      case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
      case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
      case X509_V_ERR_CERT_SIGNATURE_FAILURE:
        return UnauthenticatedError("the certificate " + holder +
                                    " is not signed by this cluster's CA (its issuer: " +
                                    NameText(X509_get_issuer_name(cert.get())) + ")");
      case X509_V_ERR_INVALID_PURPOSE:
        return UnauthenticatedError("the certificate " + holder + " may not serve as a TLS " +
                                    (use == CertificateUse::kServer ? "server" : "client") +
                                    " (its extended key usage)");
      default:
        return UnauthenticatedError("the certificate " + holder +
                                    " is refused: " + X509_verify_cert_error_string(error));
    }
  }
  return ReadCertificateIdentity(certificate_pem);
}

StatusOr<CertificateIdentity> VerifyCoordinatorCertificate(const std::string& ca_pem,
                                                           const std::string& certificate_pem,
                                                           int64_t now_unix_s,
                                                           const std::string& chain_pem) {
  StatusOr<CertificateIdentity> identity =
      VerifyCertificate(ca_pem, certificate_pem, CertificateUse::kServer, now_unix_s, chain_pem);
  if (!identity.ok()) {
    return Status(identity.status().code(),
                  "the server's certificate: " + std::string(identity.status().message()));
  }
  if (identity->role != Role::kCoordinator) {
    return UnauthenticatedError(
        std::string("the server presents a ") + RoleName(identity->role) + " certificate (" +
        identity->common_name + ", OU " + RoleUnit(identity->role) +
        ") from your CA, not the coordinator's (OU " + RoleUnit(Role::kCoordinator) +
        "): whoever runs it is not your coordinator");
  }
  ASSIGN_OR_RETURN(X509Ptr cert, ParseCertificate(certificate_pem));
  if (X509_check_host(cert.get(), kCoordinatorTlsName, 0, 0, nullptr) != 1) {
    return UnauthenticatedError(std::string("the server's coordinator certificate does not bear "
                                            "the name ") +
                                kCoordinatorTlsName);
  }
  return identity;
}

}  // namespace deepool::security
