//! Credentials for a registry, and what the registry asks for.
//!
//! Credentials are found, first match wins:
//!
//! 1. `SEALFS_REGISTRY_USERNAME` and `SEALFS_REGISTRY_PASSWORD` in the environment (both set;
//!    one without the other is an error, not a silent fall back to other credentials);
//! 2. the file `REGISTRY_AUTH_FILE` names (podman's and skopeo's `auth.json`, the same format);
//! 3. docker's `config.json` (in `DOCKER_CONFIG`, else `~/.docker/`), through the
//!    `docker_credential` crate: `auths` entries and credential helpers (`credsStore`,
//!    `credHelpers`);
//! 4. none: anonymous.
//!
//! What they are used for depends on the registry's challenge ([`Challenge`], from one `GET /v2/`
//! at the start of a session): none (an open registry: requests carry no credentials), `Bearer`
//! (the token flow: the credentials, or none, go to the token endpoint the challenge names, and
//! the token to the registry; `oci-client` does this and caches the token until it expires), or
//! `Basic` (the credentials go with every request; without credentials that is an error before any
//! other request, naming the registry and where credentials are looked for).

use crate::RegistryError;

/// Credentials for one registry.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// None.
    Anonymous,
    /// A user name and password (or a personal access token as the password).
    Basic {
        /// The user name.
        username: String,
        /// The password.
        password: String,
    },
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::Anonymous => write!(f, "Anonymous"),
            Credentials::Basic { username, .. } => write!(f, "Basic({username}, ***)"),
        }
    }
}

impl Credentials {
    /// The `oci-client` form.
    pub(crate) fn to_oci(&self) -> oci_client::secrets::RegistryAuth {
        match self {
            Credentials::Anonymous => oci_client::secrets::RegistryAuth::Anonymous,
            Credentials::Basic { username, password } => {
                oci_client::secrets::RegistryAuth::Basic(username.clone(), password.clone())
            }
        }
    }
}

/// Where credentials are looked for, as messages say it.
pub const CREDENTIAL_SOURCES: &str = "SEALFS_REGISTRY_USERNAME and SEALFS_REGISTRY_PASSWORD, \
     the file REGISTRY_AUTH_FILE names, or docker's config.json (DOCKER_CONFIG or ~/.docker)";

/// The credentials for `registry` (`HOST[:PORT]`), found as the module says.
pub fn credentials_for(registry: &str) -> Result<Credentials, RegistryError> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    match (
        env("SEALFS_REGISTRY_USERNAME"),
        env("SEALFS_REGISTRY_PASSWORD"),
    ) {
        (Some(username), Some(password)) => return Ok(Credentials::Basic { username, password }),
        (Some(_), None) | (None, Some(_)) => {
            let (set, unset) = if env("SEALFS_REGISTRY_USERNAME").is_some() {
                ("SEALFS_REGISTRY_USERNAME", "SEALFS_REGISTRY_PASSWORD")
            } else {
                ("SEALFS_REGISTRY_PASSWORD", "SEALFS_REGISTRY_USERNAME")
            };
            return Err(RegistryError::Credentials {
                registry: registry.to_string(),
                reason: format!(
                    "{set} is set but {unset} is not (or is empty): set both, or neither to use \
                     the file REGISTRY_AUTH_FILE names or docker's config.json"
                ),
            });
        }
        (None, None) => {}
    }
    let from = |r: Result<
        docker_credential::DockerCredential,
        docker_credential::CredentialRetrievalError,
    >,
                file: String,
                text: &[u8]|
     -> Result<Option<Credentials>, RegistryError> {
        use docker_credential::{CredentialRetrievalError as E, DockerCredential as C};
        match r {
            Ok(C::UsernamePassword(username, password)) => {
                Ok(Some(Credentials::Basic { username, password }))
            }
            Ok(C::IdentityToken(_)) => Err(RegistryError::Credentials {
                registry: registry.to_string(),
                reason: format!(
                    "{file}: an identity token (OAuth refresh token) is not supported; \
                     log in with a user name and password or access token"
                ),
            }),
            Err(E::NoCredentialConfigured | E::ConfigNotFound) => Ok(None),
            Err(E::ConfigReadError) => Err(RegistryError::Credentials {
                registry: registry.to_string(),
                reason: format!("{file}: not a credentials file (JSON with `auths`)"),
            }),
            Err(E::HelperCommunicationError) => Err(RegistryError::Credentials {
                registry: registry.to_string(),
                reason: match helper_named(text, registry) {
                    Some(name) => {
                        let program = format!("docker-credential-{name}");
                        let why = if on_path(&program) {
                            "could not be run, or did not answer"
                        } else {
                            "is not installed (not found on PATH)"
                        };
                        format!(
                            "{file}: credHelpers names the helper `{name}` for {registry}, but \
                             its program {program} {why}"
                        )
                    }
                    None => format!("{file}: its credential helper could not be run"),
                },
            }),
            Err(e) => Err(RegistryError::Credentials {
                registry: registry.to_string(),
                reason: format!("{file}: {e}"),
            }),
        }
    };
    // The auth file REGISTRY_AUTH_FILE names, then docker's config.json: a missing file is no
    // credentials; one that cannot be read or parsed is an error.
    let docker = std::env::var_os("DOCKER_CONFIG")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".docker")))
        .map(|d| d.join("config.json"));
    let files = env("REGISTRY_AUTH_FILE")
        .map(|p| (std::path::PathBuf::from(p), true))
        .into_iter()
        .chain(docker.map(|p| (p, false)));
    for (path, named) in files {
        let shown = sealfs_text::escape_path(&path);
        match std::fs::read(&path) {
            Ok(text) => {
                let r = docker_credential::get_credential_from_reader(&text[..], registry);
                if let Some(c) = from(r, shown, &text)? {
                    return Ok(c);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !named => {}
            Err(e) => {
                return Err(RegistryError::Credentials {
                    registry: registry.to_string(),
                    reason: format!("{shown}: {e}"),
                })
            }
        }
    }
    Ok(Credentials::Anonymous)
}

/// The credential helper a docker `config.json` names for `registry` (`credHelpers`, the entry
/// `docker_credential` runs), for messages.
fn helper_named(config: &[u8], registry: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(config).ok()?;
    let name = v.get("credHelpers")?.get(registry)?.as_str()?;
    (!name.is_empty()).then(|| name.to_string())
}

/// Whether an executable file called `program` is in a directory of `PATH`.
fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// What a registry asks of a client, from its answer to `GET /v2/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Challenge {
    /// Nothing: an open registry.
    None,
    /// The token flow (`WWW-Authenticate: Bearer realm=...`).
    Bearer,
    /// Basic credentials with every request.
    Basic,
}

/// The challenge in a `401`'s `WWW-Authenticate` header (`None` for a 401 without one, or with a
/// scheme this client does not speak; the caller turns that into an error).
pub fn parse_challenge(www_authenticate: Option<&str>) -> Option<Challenge> {
    let h = www_authenticate?.trim_start();
    let scheme = h.split([' ', ',']).next().unwrap_or("");
    if scheme.eq_ignore_ascii_case("bearer") {
        // A bearer challenge must name the token endpoint.
        h.to_ascii_lowercase()
            .contains("realm=")
            .then_some(Challenge::Bearer)
    } else if scheme.eq_ignore_ascii_case("basic") {
        Some(Challenge::Basic)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_are_told_apart() {
        assert_eq!(
            parse_challenge(Some(r#"Bearer realm="https://a/token",service="r""#)),
            Some(Challenge::Bearer)
        );
        assert_eq!(
            parse_challenge(Some(r#"Basic realm="x""#)),
            Some(Challenge::Basic)
        );
        assert_eq!(
            parse_challenge(Some("Bearer service=\"r\"")),
            None,
            "no token endpoint"
        );
        assert_eq!(parse_challenge(Some("Negotiate")), None);
        assert_eq!(parse_challenge(None), None);
    }

    #[test]
    fn a_password_is_never_shown() {
        let c = Credentials::Basic {
            username: "u".into(),
            password: "secret".into(),
        };
        assert!(!format!("{c:?}").contains("secret"));
    }
}
