// SHA-256, HMAC-SHA256 and the authenticated store (Note [Run secret]).
#include "collectives/rendezvous/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstring>

#include "collectives/rendezvous/store.h"
#include "common/error.h"

namespace omt {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  OMT_CHECK(ctx_ != nullptr && EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) == 1,
            kInternal, "OpenSSL could not start a SHA-256 digest");
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256::update(const void* data, size_t size) {
  if (size > 0) EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, size);
}

void Sha256::update(const std::string& text) { update(text.c_str(), text.size() + 1); }

std::string Sha256::hex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), md, &n);
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out += digits[md[i] >> 4];
    out += digits[md[i] & 15];
  }
  return out;
}

std::string hmac_sha256(const std::string& key, const void* data, size_t size) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  static const unsigned char kEmpty = 0;
  OMT_CHECK(HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
                 size > 0 ? static_cast<const unsigned char*>(data) : &kEmpty, size, md, &n) != nullptr,
            kInternal, "OpenSSL could not compute an HMAC-SHA256");
  return std::string(reinterpret_cast<const char*>(md), n);
}

bool equal_constant_time(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

namespace {

// A tagged record: kMagic, 32 bytes of HMAC-SHA256(secret, key \0 value), the value.
constexpr char kMagic[] = "OMTAUTH1";
constexpr size_t kMagicSize = sizeof(kMagic) - 1;
constexpr size_t kTagSize = 32;

class AuthenticatedStore final : public Store {
 public:
  AuthenticatedStore(std::shared_ptr<Store> inner, std::string secret)
      : inner_(std::move(inner)), secret_(std::move(secret)) {}

  void set(const std::string& key, const std::vector<char>& value) override {
    if (secret_.empty()) return inner_->set(key, value);
    std::vector<char> record(kMagic, kMagic + kMagicSize);
    const std::string tag = tag_of(key, value.data(), value.size());
    record.insert(record.end(), tag.begin(), tag.end());
    record.insert(record.end(), value.begin(), value.end());
    inner_->set(key, record);
  }
  bool check(const std::vector<std::string>& keys) override { return inner_->check(keys); }
  std::vector<char> get(const std::string& key) override {
    std::vector<char> record = inner_->get(key);
    const bool tagged = record.size() >= kMagicSize + kTagSize &&
                        std::memcmp(record.data(), kMagic, kMagicSize) == 0;
    if (secret_.empty()) {
      OMT_CHECK(!tagged, kCommunication, "store record '", key, "' in ", inner_->describe(),
                " is authenticated with a run secret, but this rank has no OMT_RUN_SECRET. Start "
                "every rank with the launcher's OMT_RUN_SECRET (--nproc passes it to its "
                "processes; with mpirun -x OMT_RUN_SECRET, srun --export=ALL).");
      return record;
    }
    const char* value = record.data() + kMagicSize + kTagSize;
    const size_t size = tagged ? record.size() - kMagicSize - kTagSize : 0;
    const bool valid =
        tagged && equal_constant_time(std::string(record.data() + kMagicSize, kTagSize), tag_of(key, value, size));
    OMT_CHECK(valid, kCommunication, "store record '", key, "' in ", inner_->describe(), " is ",
              tagged ? "not authenticated by this run's secret" : "not authenticated (no tag)",
              ": the rank that wrote it was started ", tagged ? "with another OMT_RUN_SECRET" : "without OMT_RUN_SECRET",
              ", or a process outside the job wrote it. Start every rank with the launcher's OMT_RUN_SECRET, "
              "and keep the store (OMT_STORE) private to the job.");
    return std::vector<char>(value, value + size);
  }
  std::string describe() const override { return inner_->describe(); }

 private:
  // The key is inside the tag, so a record copied under another key (another rank's) fails.
  std::string tag_of(const std::string& key, const char* value, size_t size) const {
    std::string message = key;
    message.push_back('\0');
    message.append(value, size);
    return hmac_sha256(secret_, message.data(), message.size());
  }

  std::shared_ptr<Store> inner_;
  const std::string secret_;
};

}  // namespace

std::shared_ptr<Store> authenticated_store(std::shared_ptr<Store> inner, std::string secret) {
  return std::make_shared<AuthenticatedStore>(std::move(inner), std::move(secret));
}

}  // namespace omt
