// The NATS C client (Debian libnats-dev, cnats 3.4): touched only by the NATSLog module.
#include <nats/nats.h>
