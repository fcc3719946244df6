import HTTP

/// The web panel's side of `POST /login` and `POST /logout`: a form post from its login page or its
/// logout button, answered with redirects and pages. `WebPanel` implements it and hands it to
/// `IdentityService.answerLoginForms(with:)`; Identity answers programs (JSON) on the same routes,
/// and keeps the sessions, the password check, the session cookie and the origin check that runs
/// before either.
public protocol PanelLoginForms: Sendable {
    /// A form-encoded login whose `Origin` was not another site's.
    func login(_ request: HTTPRequest) throws(APIError) -> HTTPResponse
    /// A form-encoded logout.
    func logout(_ request: HTTPRequest) -> HTTPResponse
}
