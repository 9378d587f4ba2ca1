#[zmesh_macros::service(channel = "pump")]
trait Pump {
    #[query]
    fn pressure(&self) -> f64;
}

fn main() {}
