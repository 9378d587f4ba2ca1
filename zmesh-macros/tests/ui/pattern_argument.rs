#[zmesh_macros::service(channel = "pump")]
trait Pump {
    #[idempotent]
    async fn set_range(&self, (low, high): (f64, f64)) -> f64;
}

fn main() {}
