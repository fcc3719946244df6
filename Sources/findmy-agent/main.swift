// findmy-agent: a Linux device's side of findmy, built on FindMyClient (docs/agent.md).
import FindMyClient

#if canImport(Glibc)
    import Glibc
#endif

let usage = """
    usage: findmy-agent enrol --server URL (--user-token T | --setup-link L) --name NAME [--state-dir DIR]
           findmy-agent run [--state-dir DIR] (--gpsd HOST:PORT | --fixed LAT,LON[,ACCURACY]) [options]
           findmy-agent stop-sound [--state-dir DIR]
           findmy-agent status [--state-dir DIR]
    """
// Until the commands are wired: every invocation is a usage error naming the commands to come.
_ = ClientFix.self
var text = Array((usage + "\n").utf8)
_ = write(2, &text, text.count)
exit(2)
