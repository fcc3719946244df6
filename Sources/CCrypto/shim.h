#include <openssl/rand.h>
