#include "testing/test_pki.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

#include "absl/strings/str_cat.h"

namespace gpulet::testing {
namespace {

struct Free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
};
template <typename T>
using Ptr = std::unique_ptr<T, Free>;

absl::Status SslError(const char* what) {
  unsigned long e = ERR_get_error();
  char buf[256] = "unknown";
  if (e != 0) ERR_error_string_n(e, buf, sizeof(buf));
  ERR_clear_error();
  return absl::InternalError(absl::StrCat(what, ": ", buf));
}

std::string BioText(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(n));
}

absl::StatusOr<std::string> CertPem(X509* cert) {
  Ptr<BIO> bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return SslError("PEM_write_bio_X509");
  return BioText(bio.get());
}

absl::StatusOr<std::string> KeyPem(EVP_PKEY* key) {
  Ptr<BIO> bio(BIO_new(BIO_s_mem()));
  if (!bio ||
      PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return SslError("PEM_write_bio_PrivateKey");
  }
  return BioText(bio.get());
}

absl::Status AddExt(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  Ptr<X509_EXTENSION> ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) return SslError("X509_add_ext");
  return absl::OkStatus();
}

// A certificate for `key` named `cn`, issued by `issuer` (null: self-signed) whose key is
// `issuer_key`, with `exts` (nid, value) added.
absl::StatusOr<Ptr<X509>> Issue(EVP_PKEY* key, const std::string& cn, X509* issuer,
                                EVP_PKEY* issuer_key,
                                const std::vector<std::pair<int, std::string>>& exts) {
  Ptr<X509> cert(X509_new());
  if (!cert) return SslError("X509_new");
  X509_set_version(cert.get(), 2);
  unsigned char serial[16];
  RAND_bytes(serial, sizeof(serial));
  serial[0] &= 0x7f;
  BIGNUM* bn = BN_bin2bn(serial, sizeof(serial), nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 24 * 3600);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), issuer != nullptr ? X509_get_subject_name(issuer) : name);
  X509_set_pubkey(cert.get(), key);
  for (const auto& [nid, value] : exts) {
    absl::Status s = AddExt(cert.get(), issuer != nullptr ? issuer : cert.get(), nid, value);
    if (!s.ok()) return s;
  }
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0) return SslError("X509_sign");
  return cert;
}

absl::StatusOr<Ptr<EVP_PKEY>> NewKey() {
  Ptr<EVP_PKEY> key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
  if (!key) return SslError("EVP_PKEY_Q_keygen");
  return key;
}

}  // namespace

absl::StatusOr<TestCert> MakeTestCa(const std::string& common_name) {
  absl::StatusOr<Ptr<EVP_PKEY>> key = NewKey();
  if (!key.ok()) return key.status();
  absl::StatusOr<Ptr<X509>> cert = Issue(key->get(), common_name, nullptr, key->get(),
                                         {{NID_basic_constraints, "critical,CA:TRUE"},
                                          {NID_key_usage, "critical,keyCertSign,cRLSign"},
                                          {NID_subject_key_identifier, "hash"}});
  if (!cert.ok()) return cert.status();
  TestCert out;
  absl::StatusOr<std::string> c = CertPem(cert->get());
  absl::StatusOr<std::string> k = KeyPem(key->get());
  if (!c.ok()) return c.status();
  if (!k.ok()) return k.status();
  out.cert_pem = *c;
  out.key_pem = *k;
  return out;
}

absl::StatusOr<TestCert> MakeTestCert(const TestCert& ca, const std::string& common_name,
                                      const std::vector<std::string>& ip_sans,
                                      const std::vector<std::string>& dns_sans, bool client) {
  Ptr<BIO> cb(BIO_new_mem_buf(ca.cert_pem.data(), static_cast<int>(ca.cert_pem.size())));
  Ptr<X509> ca_cert(PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr));
  Ptr<BIO> kb(BIO_new_mem_buf(ca.key_pem.data(), static_cast<int>(ca.key_pem.size())));
  Ptr<EVP_PKEY> ca_key(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr));
  if (!ca_cert || !ca_key) return SslError("reading the test CA");
  absl::StatusOr<Ptr<EVP_PKEY>> key = NewKey();
  if (!key.ok()) return key.status();
  std::vector<std::pair<int, std::string>> exts = {
      {NID_basic_constraints, "critical,CA:FALSE"},
      {NID_key_usage, "critical,digitalSignature,keyEncipherment"},
      {NID_ext_key_usage, client ? "clientAuth" : "serverAuth"},
      {NID_authority_key_identifier, "keyid:always"}};
  std::string san;
  for (const std::string& ip : ip_sans) absl::StrAppend(&san, san.empty() ? "" : ",", "IP:", ip);
  for (const std::string& d : dns_sans) absl::StrAppend(&san, san.empty() ? "" : ",", "DNS:", d);
  if (!san.empty()) exts.push_back({NID_subject_alt_name, san});
  absl::StatusOr<Ptr<X509>> cert =
      Issue(key->get(), common_name, ca_cert.get(), ca_key.get(), exts);
  if (!cert.ok()) return cert.status();
  TestCert out;
  absl::StatusOr<std::string> c = CertPem(cert->get());
  absl::StatusOr<std::string> k = KeyPem(key->get());
  if (!c.ok()) return c.status();
  if (!k.ok()) return k.status();
  out.cert_pem = *c;
  out.key_pem = *k;
  return out;
}

}  // namespace gpulet::testing
