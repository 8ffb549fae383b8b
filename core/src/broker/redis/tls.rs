//! Checks `RedisOptions::tls_ca` before it is handed to the TLS client.
//!
//! redis-rs reads the PEM leniently: bytes with no certificate in them give
//! an empty set of roots, and the connection then fails as "invalid peer
//! certificate: UnknownIssuer", which blames the server for a bad option.
//! Refusing the option itself, naming it, says what is wrong.

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::task::state::Refused;

/// Refuses `pem` unless it holds at least one PEM certificate and nothing
/// that fails to parse as one.
pub(crate) fn check_ca(pem: &[u8]) -> Result<(), Refused> {
    let mut n = 0;
    for c in CertificateDer::pem_slice_iter(pem) {
        if let Err(e) = c {
            return Err(Refused::Invalid(format!(
                "invalid `tls_ca`: not a PEM certificate bundle ({e})"
            )));
        }
        n += 1;
    }
    if n == 0 {
        return Err(Refused::Invalid(
            "invalid `tls_ca`: no PEM certificate (-----BEGIN CERTIFICATE-----) in it".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_without_a_certificate_is_refused_naming_the_option() {
        for bad in [
            &b""[..],
            b"not a certificate",
            b"-----BEGIN CERTIFICATE-----\n!!\n",
        ] {
            let e = check_ca(bad).unwrap_err().to_string();
            assert!(e.starts_with("invalid `tls_ca`: "), "{e}");
        }
    }
}
