import CSodium

/// Argon2id password hashes through libsodium's `crypto_pwhash_argon2id_str` and
/// `crypto_pwhash_argon2id_str_verify`.
///
/// The stored form is libsodium's self-describing string (`$argon2id$v=19$m=65536,t=2,p=1$salt$hash`):
/// salt and parameters travel with the hash, so a later change of the limits below still verifies
/// every hash written before it.
///
/// Limits: libsodium's INTERACTIVE pair, `opslimit` 2 passes over `memlimit` 64 MiB, about 0.1 s on
/// one core. MODERATE (3 passes, 256 MiB, about 0.7 s) is meant for secrets that are hashed rarely;
/// a login is an online request on a small server where every concurrent login holds the memlimit,
/// so MODERATE would let four simultaneous logins take 1 GiB. docs/privacy.md repeats this choice.
public enum PasswordHash {
    /// `crypto_pwhash_argon2id_OPSLIMIT_INTERACTIVE`: passes over memory.
    public static var opsLimit: UInt64 { UInt64(crypto_pwhash_argon2id_opslimit_interactive()) }
    /// `crypto_pwhash_argon2id_MEMLIMIT_INTERACTIVE`: bytes of memory per hash (64 MiB).
    public static var memoryBytesLimit: Int { crypto_pwhash_argon2id_memlimit_interactive() }
    /// Longer passwords are refused before hashing: the hash's cost grows with nothing an attacker
    /// should control, and no one types 1 KiB.
    public static let passwordBytesMax = 1024

    /// `sodium_init` once; it is safe to call again and from several threads.
    private static let initialised: Bool = sodium_init() >= 0

    /// The Argon2id string of `password`, with a fresh random salt. Traps only when libsodium cannot
    /// allocate `memoryBytesLimit`, which leaves nothing sensible to do.
    public static func hash(_ password: String) -> String {
        precondition(initialised, "sodium_init failed")
        precondition(password.utf8.count <= passwordBytesMax, "password longer than passwordBytesMax")
        var output = [CChar](repeating: 0, count: Int(crypto_pwhash_argon2id_strbytes()))
        // A terminating zero keeps the buffer's address non-nil for an empty password; not counted.
        let bytes = Array(password.utf8) + [0]
        let status = bytes.withUnsafeBufferPointer { input in
            input.withMemoryRebound(to: CChar.self) { chars in
                crypto_pwhash_argon2id_str(
                    &output, chars.baseAddress!, UInt64(chars.count - 1), opsLimit, memoryBytesLimit)
            }
        }
        precondition(status == 0, "crypto_pwhash_argon2id_str failed: out of memory")
        return String(decoding: output.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Whether `password` matches `stored`. Runs the full Argon2id computation whatever the answer;
    /// the final comparison inside libsodium is constant-time. A malformed `stored` is false.
    public static func verify(_ password: String, against stored: String) -> Bool {
        precondition(initialised, "sodium_init failed")
        guard password.utf8.count <= passwordBytesMax else { return false }
        let bytes = Array(password.utf8) + [0]
        return bytes.withUnsafeBufferPointer { input in
            input.withMemoryRebound(to: CChar.self) { chars in
                crypto_pwhash_argon2id_str_verify(stored, chars.baseAddress!, UInt64(chars.count - 1)) == 0
            }
        }
    }

    /// The hash of a random password that was never kept, with the limits above: verifying against
    /// it when a login names an unknown user (or one without a password) costs what a real check
    /// costs, so the answer's time does not tell whether the name exists. A constant rather than
    /// hashed at start: hashing it took `memoryBytesLimit` (64 MiB) at every start, which stayed
    /// the server's peak resident memory for its whole life. Knowing it gives nothing: no password
    /// is known to match it, and a match on it logs no one in. A test checks that its parameters
    /// are the ones `hash` uses, so a change of the limits changes it too.
    public static let decoy =
        "$argon2id$v=19$m=65536,t=2,p=1$DADnorvFRJ26PtJ5Q7OEgg$BIqJ339Pf+8pGUFFqozS41d1NKvjeCxwyxo0SzMbZIw"
}
