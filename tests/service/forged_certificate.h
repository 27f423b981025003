// A certificate `deepool certs` never issues: a user's or node's role under the coordinator's
// name (CN and DNS name deepool-coordinator), signed by the cluster CA, as another tool, or
// deepool before it refused that name, could have made one. Clients used to believe such a
// server; they must refuse it by its role. Test-only; plain OpenSSL.
#pragma once

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <catch2/catch.hpp>
#include <string>

#include "security/certificates.h"

namespace deepool::testing {

inline security::KeyAndCertificate ForgeCoordinatorNamed(const security::KeyAndCertificate& ca,
                                                         security::Role role) {
  auto read_cert = [](const std::string& pem) {
    BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
    X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    return cert;
  };
  BIO* key_bio =
      BIO_new_mem_buf(ca.private_key_pem.data(), static_cast<int>(ca.private_key_pem.size()));
  EVP_PKEY* ca_key = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
  BIO_free(key_bio);
  X509* ca_cert = read_cert(ca.certificate_pem);
  REQUIRE(ca_key != nullptr);
  REQUIRE(ca_cert != nullptr);

  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* cert = X509_new();
  X509_set_version(cert, X509_VERSION_3);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 4242);
  X509_gmtime_adj(X509_getm_notBefore(cert), -300);
  X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
  X509_NAME* subject = X509_get_subject_name(cert);
  const std::string unit = security::RoleUnit(role);
  X509_NAME_add_entry_by_txt(subject, "O", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>("deepool"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(subject, "OU", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(unit.c_str()), -1, -1, 0);
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(security::kCoordinatorTlsName),
                             -1, -1, 0);
  X509_set_issuer_name(cert, X509_get_subject_name(ca_cert));
  X509_set_pubkey(cert, key);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, ca_cert, cert, nullptr, nullptr, 0);
  for (const auto& [nid, value] :
       {std::pair<int, std::string>{NID_basic_constraints, "critical,CA:FALSE"},
        {NID_key_usage, "critical,digitalSignature,keyAgreement"},
        {NID_ext_key_usage, "serverAuth,clientAuth"},
        {NID_subject_alt_name, std::string("DNS:") + security::kCoordinatorTlsName}}) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
    REQUIRE(ext != nullptr);
    X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
  }
  REQUIRE(X509_sign(cert, ca_key, EVP_sha256()) > 0);

  auto pem_of = [](auto write) {
    BIO* bio = BIO_new(BIO_s_mem());
    write(bio);
    char* data = nullptr;
    const long size = BIO_get_mem_data(bio, &data);
    std::string text(data, static_cast<size_t>(size));
    BIO_free(bio);
    return text;
  };
  security::KeyAndCertificate forged;
  forged.certificate_pem = pem_of([cert](BIO* bio) { PEM_write_bio_X509(bio, cert); });
  forged.private_key_pem = pem_of([key](BIO* bio) {
    PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  });
  X509_free(cert);
  EVP_PKEY_free(key);
  X509_free(ca_cert);
  EVP_PKEY_free(ca_key);
  return forged;
}

}  // namespace deepool::testing
