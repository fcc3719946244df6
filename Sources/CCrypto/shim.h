#include <openssl/rand.h>
#include "push.h"
