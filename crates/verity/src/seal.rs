//! What a seal header names in fs-verity terms: its parameters and the image digest, checked once
//! for every reader and signer of a seal (`docs/format.md` §5.4).

use crate::{file_digest, Descriptor, Digest, HashAlg, Params};
use sealfs_format::SealHeader;

/// The parameters and image digest of a seal header that [`SealHeader::parse`] accepted, after the
/// checks that need fs-verity: a known algorithm and valid parameters, a descriptor the kernel could
/// produce (unused bytes and `sig_size` zero) and a header digest field equal to `H(descriptor)`.
/// `Err` says what is wrong.
pub fn seal_params(header: &SealHeader) -> Result<(Params, Digest), String> {
    let alg = HashAlg::from_id(header.hash_algorithm).map_err(|e| e.to_string())?;
    let params = Params::from_log_block_size(alg, header.log_blocksize, header.salt())
        .map_err(|e| format!("seal parameters: {e}"))?;
    Descriptor::from_bytes(&header.descriptor).map_err(|e| format!("descriptor: {e}"))?;
    if header.descriptor[4..8] != [0; 4] {
        return Err("descriptor: non-zero sig_size".into());
    }
    let digest = file_digest(&params, &header.descriptor);
    let d = digest.as_bytes().len();
    if header.digest[..d] != *digest.as_bytes() || header.digest[d..].iter().any(|&b| b != 0) {
        return Err("the header's digest field is not the hash of its descriptor".into());
    }
    Ok((params, digest))
}
