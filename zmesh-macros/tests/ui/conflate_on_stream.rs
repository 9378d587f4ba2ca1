#[zmesh_macros::service(channel = "pump")]
trait Pump {
    #[idempotent(conflate)]
    async fn ramp(&self, steps: Items<f64>, to: f64) -> f64;
}

fn main() {}
