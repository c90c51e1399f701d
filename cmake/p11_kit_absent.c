/*
 * p11-kit's entry points that Debian 12's static GnuTLS refers to, each answering "no
 * PKCS#11 here". Linked into the statically linked `gpulet` instead of libp11-kit.so
 * (cmake/StaticDeps.cmake), which with its libffi was 1.3 MB of the 20 MB image for code
 * gpulet never runs: gpulet hands GnuTLS certificates and keys as PEM it read itself and
 * its own CA bundle, never a "pkcs11:" URL or the system trust store (the only paths into
 * p11-kit). Should anything still ask, PKCS#11 fails closed: no module loads, no URI
 * parses, no PIN is given. The shared build (the sanitizer tests) links the real p11-kit;
 * the TLS tests (src/kube/, src/metrics/) pass against both.
 *
 * The declarations come from p11-kit's own headers, so a signature that differs from
 * theirs does not compile.
 */
#include <p11-kit/p11-kit.h>
#include <p11-kit/pin.h>
#include <p11-kit/uri.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static const char kNoPkcs11[] = "PKCS#11 is not available in gpulet (built without p11-kit)";

const char *p11_kit_message(void) { return kNoPkcs11; }
const char *p11_kit_strerror(CK_RV rv) { (void)rv; return kNoPkcs11; }

CK_FUNCTION_LIST **p11_kit_modules_load(const char *reserved, int flags) {
  (void)reserved; (void)flags;
  return NULL;
}
CK_FUNCTION_LIST *p11_kit_module_load(const char *module_path, int flags) {
  (void)module_path; (void)flags;
  return NULL;
}
CK_RV p11_kit_module_finalize(CK_FUNCTION_LIST *module) { (void)module; return CKR_GENERAL_ERROR; }
void p11_kit_module_release(CK_FUNCTION_LIST *module) { (void)module; }
int p11_kit_module_get_flags(CK_FUNCTION_LIST *module) { (void)module; return 0; }
char *p11_kit_module_get_name(CK_FUNCTION_LIST *module) { (void)module; return NULL; }
char *p11_kit_config_option(CK_FUNCTION_LIST *module, const char *option) {
  (void)module; (void)option;
  return NULL;
}

P11KitPin *p11_kit_pin_request(const char *pin_source, P11KitUri *pin_uri,
                               const char *pin_description, P11KitPinFlags pin_flags) {
  (void)pin_source; (void)pin_uri; (void)pin_description; (void)pin_flags;
  return NULL;
}
P11KitPin *p11_kit_pin_file_callback(const char *pin_source, P11KitUri *pin_uri,
                                     const char *pin_description, P11KitPinFlags pin_flags,
                                     void *callback_data) {
  (void)pin_source; (void)pin_uri; (void)pin_description; (void)pin_flags; (void)callback_data;
  return NULL;
}
P11KitPin *p11_kit_pin_new_for_string(const char *value) { (void)value; return NULL; }
const unsigned char *p11_kit_pin_get_value(P11KitPin *pin, size_t *length) {
  (void)pin;
  if (length != NULL) *length = 0;
  return NULL;
}
size_t p11_kit_pin_get_length(P11KitPin *pin) { (void)pin; return 0; }
void p11_kit_pin_unref(P11KitPin *pin) { (void)pin; }
int p11_kit_pin_register_callback(const char *pin_source, p11_kit_pin_callback callback,
                                  void *callback_data, p11_kit_pin_destroy_func callback_destroy) {
  (void)pin_source; (void)callback; (void)callback_data; (void)callback_destroy;
  return -1;
}
void p11_kit_pin_unregister_callback(const char *pin_source, p11_kit_pin_callback callback,
                                     void *callback_data) {
  (void)pin_source; (void)callback; (void)callback_data;
}

/* Two string helpers with p11-kit's meaning: a fixed-width field padded with spaces. */
size_t p11_kit_space_strlen(const unsigned char *string, size_t max_length) {
  size_t n = max_length;
  while (n > 0 && string[n - 1] == ' ') --n;
  return n;
}
char *p11_kit_space_strdup(const unsigned char *string, size_t max_length) {
  size_t n = p11_kit_space_strlen(string, max_length);
  char *copy = malloc(n + 1);
  if (copy == NULL) return NULL;
  memcpy(copy, string, n);
  copy[n] = '\0';
  return copy;
}

P11KitUri *p11_kit_uri_new(void) { return NULL; }
void p11_kit_uri_free(P11KitUri *uri) { (void)uri; }
int p11_kit_uri_parse(const char *string, P11KitUriType uri_type, P11KitUri *uri) {
  (void)string; (void)uri_type; (void)uri;
  return P11_KIT_URI_BAD_SCHEME;
}
int p11_kit_uri_format(P11KitUri *uri, P11KitUriType uri_type, char **string) {
  (void)uri; (void)uri_type;
  if (string != NULL) *string = NULL;
  return P11_KIT_URI_NOT_FOUND;
}
CK_ATTRIBUTE_PTR p11_kit_uri_get_attribute(P11KitUri *uri, CK_ATTRIBUTE_TYPE attr_type) {
  (void)uri; (void)attr_type;
  return NULL;
}
CK_ATTRIBUTE_PTR p11_kit_uri_get_attributes(P11KitUri *uri, CK_ULONG *n_attrs) {
  (void)uri;
  if (n_attrs != NULL) *n_attrs = 0;
  return NULL;
}
int p11_kit_uri_set_attribute(P11KitUri *uri, CK_ATTRIBUTE_PTR attr) {
  (void)uri; (void)attr;
  return P11_KIT_URI_NOT_FOUND;
}
CK_INFO_PTR p11_kit_uri_get_module_info(P11KitUri *uri) { (void)uri; return NULL; }
CK_TOKEN_INFO_PTR p11_kit_uri_get_token_info(P11KitUri *uri) { (void)uri; return NULL; }
const char *p11_kit_uri_get_pin_source(const P11KitUri *uri) { (void)uri; return NULL; }
const char *p11_kit_uri_get_pin_value(const P11KitUri *uri) { (void)uri; return NULL; }
int p11_kit_uri_match_module_info(const P11KitUri *uri, const CK_INFO *info) {
  (void)uri; (void)info;
  return 0;
}
int p11_kit_uri_match_token_info(const P11KitUri *uri, const CK_TOKEN_INFO *token_info) {
  (void)uri; (void)token_info;
  return 0;
}
