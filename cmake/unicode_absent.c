/*
 * libidn2's and libunistring's entry points that Debian 12's static GnuTLS refers to, each
 * answering "not available here". Linked into the statically linked `gpulet` instead of
 * their archives (cmake/StaticDeps.cmake), whose Unicode tables (IDNA mappings, general
 * categories, scripts, normalization data) were about 0.3 MB of the 20 MB image for paths
 * gpulet never takes: GnuTLS calls them only to convert a host name or e-mail address that
 * is not printable ASCII (str-idna.c returns an ASCII name as it is, before any of them) and
 * to normalize a UTF-8 password (str-unicode.c: PKCS#12 and encrypted PKCS#8 keys, which
 * gpulet does not read; it hands GnuTLS PEM it read itself). Host names gpulet checks itself
 * (kube/tls_transport.h) and an API server's is an IP literal or an ASCII DNS name. Should
 * anything still ask, it fails closed: a non-ASCII name does not convert, a password does
 * not normalize. The shared build (the sanitizer tests) links the real libraries; the TLS
 * tests (src/kube/, src/metrics/) pass against both.
 *
 * The declarations come from the libraries' own headers, so a signature that differs from
 * theirs does not compile.
 */
#include <errno.h>
#include <idn2.h>
#include <stddef.h>
#include <unictype.h>
#include <uninorm.h>
#include <unistr.h>

/* Opaque to every user of <uninorm.h>: only the two forms' addresses are taken, and handed
   back to the normalizers below. */
struct unicode_normalization_form {
  int unused;
};
const struct unicode_normalization_form uninorm_nfc = {0};
const struct unicode_normalization_form uninorm_nfkc = {0};

int idn2_to_ascii_8z(const char* input, char** output, int flags) {
  (void)input;
  (void)flags;
  if (output != NULL) *output = NULL;
  return IDN2_ENCODING_ERROR;
}
int idn2_to_unicode_8z8z(const char* input, char** output, int flags) {
  (void)input;
  (void)flags;
  if (output != NULL) *output = NULL;
  return IDN2_ENCODING_ERROR;
}
const char* idn2_strerror(int rc) {
  (void)rc;
  return "internationalized names are not available in gpulet (built without libidn2)";
}
void idn2_free(void* ptr) { (void)ptr; }

/* Every string is invalid: the first position is where it fails. */
const uint8_t* u8_check(const uint8_t* s, size_t n) { return n == 0 ? NULL : s; }

/* No string converts or normalizes: each says the input is not valid. */
#define GPULET_NO_CONVERSION(name, in_t, out_t)                             \
  out_t* name(const in_t* s, size_t n, out_t* resultbuf, size_t* lengthp) { \
    (void)s, (void)n, (void)resultbuf, (void)lengthp;                       \
    errno = EILSEQ;                                                         \
    return NULL;                                                            \
  }
GPULET_NO_CONVERSION(u8_to_u16, uint8_t, uint16_t)
GPULET_NO_CONVERSION(u8_to_u32, uint8_t, uint32_t)
GPULET_NO_CONVERSION(u16_to_u8, uint16_t, uint8_t)
GPULET_NO_CONVERSION(u32_to_u8, uint32_t, uint8_t)

#define GPULET_NO_NORMALIZATION(name, t)                                       \
  t* name(uninorm_t nf, const t* s, size_t n, t* resultbuf, size_t* lengthp) { \
    (void)nf, (void)s, (void)n, (void)resultbuf, (void)lengthp;                \
    errno = EILSEQ;                                                            \
    return NULL;                                                               \
  }
GPULET_NO_NORMALIZATION(u16_normalize, uint16_t)
GPULET_NO_NORMALIZATION(u32_normalize, uint32_t)

/* No character is in any category or has any property: with u8_check failing first, GnuTLS
   never asks. */
#define GPULET_NO_CATEGORY(name) const uc_general_category_t name = {0, 0, {NULL}};
GPULET_NO_CATEGORY(UC_CATEGORY_Cc)
GPULET_NO_CATEGORY(UC_CATEGORY_Ll)
GPULET_NO_CATEGORY(UC_CATEGORY_Lm)
GPULET_NO_CATEGORY(UC_CATEGORY_Lo)
GPULET_NO_CATEGORY(UC_CATEGORY_Lt)
GPULET_NO_CATEGORY(UC_CATEGORY_Lu)
GPULET_NO_CATEGORY(UC_CATEGORY_Mc)
GPULET_NO_CATEGORY(UC_CATEGORY_Me)
GPULET_NO_CATEGORY(UC_CATEGORY_Mn)
GPULET_NO_CATEGORY(UC_CATEGORY_Nd)
GPULET_NO_CATEGORY(UC_CATEGORY_Nl)
GPULET_NO_CATEGORY(UC_CATEGORY_No)
GPULET_NO_CATEGORY(UC_CATEGORY_Pc)
GPULET_NO_CATEGORY(UC_CATEGORY_Pd)
GPULET_NO_CATEGORY(UC_CATEGORY_Pe)
GPULET_NO_CATEGORY(UC_CATEGORY_Pf)
GPULET_NO_CATEGORY(UC_CATEGORY_Pi)
GPULET_NO_CATEGORY(UC_CATEGORY_Po)
GPULET_NO_CATEGORY(UC_CATEGORY_Ps)
GPULET_NO_CATEGORY(UC_CATEGORY_Sc)
GPULET_NO_CATEGORY(UC_CATEGORY_Sk)
GPULET_NO_CATEGORY(UC_CATEGORY_Sm)
GPULET_NO_CATEGORY(UC_CATEGORY_So)
GPULET_NO_CATEGORY(UC_CATEGORY_Zs)

uc_general_category_t uc_general_category_or(uc_general_category_t a, uc_general_category_t b) {
  (void)b;
  return a;
}
uc_general_category_t uc_general_category_and_not(uc_general_category_t a,
                                                  uc_general_category_t b) {
  (void)b;
  return a;
}
bool uc_is_general_category(ucs4_t uc, uc_general_category_t category) {
  (void)uc;
  (void)category;
  return false;
}
bool uc_is_property_default_ignorable_code_point(ucs4_t uc) {
  (void)uc;
  return false;
}
bool uc_is_property_join_control(ucs4_t uc) {
  (void)uc;
  return false;
}
bool uc_is_property_not_a_character(ucs4_t uc) {
  (void)uc;
  return false;
}
