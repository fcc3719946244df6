import Crypto

#if canImport(Glibc)
    import Glibc
#endif

/// Why a provider could not be set up from the configuration. Messages name the file and the
/// fix; they never quote a key.
public enum PushSetupError: Error, Equatable, Sendable, CustomStringConvertible {
    case keyFile(KeyFileError)
    case notAKey(path: String, expected: String)
    case serviceAccount(path: String, FCMServiceAccount.Failure)
    case missing(option: String, because: String)

    public var description: String {
        switch self {
        case .keyFile(let error): error.description
        case .notAKey(let path, let expected): "\(path) does not hold \(expected)"
        case .serviceAccount(let path, let failure): "\(path): \(failure)"
        case .missing(let option, let because): "\(option) is required \(because)"
        }
    }
}

/// Loading the providers' secrets from the files the configuration names.
public enum PushSetup {
    /// An APNs signing key: the `.p8` file from Apple's developer site (PKCS#8, P-256).
    public static func apnsKey(_ path: String) throws(PushSetupError) -> PrivateKey {
        let text: [UInt8]
        do { text = try KeyFile.readPrivate(path) } catch { throw .keyFile(error) }
        guard let key = PrivateKey.pem(text), key.kind == .p256 else {
            throw .notAKey(path: path, expected: "an APNs auth key (a .p8 file: PKCS#8 P-256)")
        }
        return key
    }

    /// An FCM service account: the JSON key file from the Firebase console.
    public static func fcmServiceAccount(_ path: String) throws(PushSetupError) -> FCMServiceAccount {
        let bytes: [UInt8]
        do { bytes = try KeyFile.readPrivate(path) } catch { throw .keyFile(error) }
        do { return try FCMServiceAccount.parse(bytes) } catch { throw .serviceAccount(path: path, error) }
    }

    /// The server's VAPID key, made on first start (mode 0600) at `path`.
    public static func vapidKey(_ path: String) throws(PushSetupError) -> PrivateKey {
        do { return try KeyFile.loadOrCreateP256(path) } catch { throw .keyFile(error) }
    }

    /// The VAPID key in `directory` (made with mode 0700 when missing), as `vapidKey(_:)`.
    public static func vapidKey(inDirectory directory: String) throws(PushSetupError) -> PrivateKey {
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw .keyFile(.cannotWrite(path: directory, errno: errno))
        }
        return try vapidKey(directory + "/vapid-key.pem")
    }
}
