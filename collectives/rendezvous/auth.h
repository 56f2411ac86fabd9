// Digests and the run secret's record authentication (Note [Run secret] in
// docs/ARCHITECTURE.md). Thin wrappers over OpenSSL's libcrypto: SHA-256 and HMAC-SHA256;
// the only primitive written here is the constant-time comparison's use.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace omt {

class Store;

// Incremental SHA-256. Not thread-safe; one per digest.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t size);
  void update(const std::string& text);  // the bytes, then a 0 byte (so "ab","c" != "a","bc")
  std::string hex();                     // 64 lowercase hex digits; ends the digest

 private:
  void* ctx_;  // EVP_MD_CTX
};

// HMAC-SHA256 of `data` under `key`: 32 raw bytes.
std::string hmac_sha256(const std::string& key, const void* data, size_t size);
// Equal length and bytes, in time that depends only on the length (CRYPTO_memcmp).
bool equal_constant_time(const std::string& a, const std::string& b);

// The shortest OMT_RUN_SECRET accepted (characters).
constexpr size_t kMinRunSecretLength = 16;

// A store whose records carry HMAC-SHA256(secret, key, value) and are checked when read
// (Note [Run secret]). With an empty secret records are written plain, and reading a record
// that carries a tag throws (its writer has a secret, this rank none). Reading a record
// without a valid tag throws kCommunication naming the key, never the secret.
std::shared_ptr<Store> authenticated_store(std::shared_ptr<Store> inner, std::string secret);

}  // namespace omt
