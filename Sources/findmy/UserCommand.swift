import CLI
import Events
import Maintenance

/// `findmy user add|passwd|role|token|list`: the arguments; the work is Maintenance's `UserAdmin`.
enum UserCommand {
    static let command = Command(
        name: "user", summary: "create users (works with or without the server running)"
    ) {
        try run($0)
    }

    static let help = """
        usage: findmy user add NAME [--admin] [--json] --data-dir DIR
               findmy user passwd NAME --data-dir DIR
               findmy user role NAME admin|member --data-dir DIR
               findmy user token NAME --rotate [--json] --data-dir DIR
               findmy user list [--json] --data-dir DIR

        add     creates a user and prints its API token once; only the token's SHA-256 is stored, so a
                lost token cannot be shown again. The user token enrols devices and reads locations.
        passwd  sets the user's login password (POST /login). Read from standard input when it is not
                a terminal (`echo "$PW" | findmy user passwd anna`; one trailing newline is dropped),
                otherwise prompted for twice without echo. Only its Argon2id hash is stored; the
                user's login sessions end.
        role    makes the user an administrator or a member. An administrator manages users and
                devices; it does NOT see other users' locations unless they share them.
        token   with --rotate, gives the user a new API token, prints it once and ends every earlier
                token of the user at once (a leaked or lost token). Tokens are stored only as
                SHA-256 hashes, so an existing token can never be shown again. Login sessions and
                device tokens keep working. A user rotates their own with POST
                /api/find-my/account/token or on the panel's account page.
        list    the users with their role, whether a password is set, and their number of devices.

        When a server runs on DIR, the command goes through its admin socket DIR/admin.sock (owner
        only); otherwise it opens the event log itself.

        options:
          --data-dir DIR   the server's data directory; or set FINDMY_DATA_DIR
          --admin          (add) the user administers users and devices (it still sees only its own locations)
          --rotate         (token) replace the user's API token
          --json           (add, token, list) print JSON: {"user_id": N, "token": "..."} for add and token
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: ["data-dir"], flags: ["admin", "json", "rotate"])
        if options.flag("help") || options.positional.isEmpty {
            print(help)
            return options.flag("help") ? 0 : 2
        }
        let data = try options.required("data-dir", environment: "FINDMY_DATA_DIR")
        let json = options.flag("json")
        switch options.positional[0] {
        case "add":
            return try UserAdmin.add(
                data: data, name: try name(options, "add"), admin: options.flag("admin"), json: json)
        case "token":
            return try UserAdmin.token(
                data: data, name: try name(options, "token"), rotate: options.flag("rotate"), json: json)
        case "passwd":
            return try UserAdmin.passwd(data: data, name: try name(options, "passwd"))
        case "role":
            guard options.positional.count == 3, let role = Role(name: options.positional[2]) else {
                throw UsageError("user role takes NAME and admin or member")
            }
            return try UserAdmin.role(data: data, name: options.positional[1], role: role)
        case "list":
            return try UserAdmin.list(data: data, json: json)
        default:
            throw UsageError("unknown subcommand '\(options.positional[0])'")
        }
    }

    /// The one NAME of `add`, `token` and `passwd`.
    static func name(_ options: Options, _ subcommand: String) throws -> String {
        guard options.positional.count == 2 else {
            throw UsageError("user \(subcommand) takes exactly one NAME")
        }
        return options.positional[1]
    }
}
