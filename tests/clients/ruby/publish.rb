# publish.rb -- Bunny as its documentation shows: Bunny.new(uri).start,
# create_channel, confirm_select, exchange#publish with headers, then
# wait_for_confirms. Bunny writes every Integer as 'l', a Float as 'd', a
# Time as a timestamp in seconds. Protocol: see run_client.py.
#
# DB_MODE=x-delayed-message: an application written for the delayed-message
# plugin, unchanged (run_client.py shim): ch.exchange(name, type:
# 'x-delayed-message', arguments: { 'x-delayed-type' => ... }), queues bound to
# it, publish with header x-delay (not mandatory: the plugin returned every
# delayed mandatory message).
require 'bunny'

ex_name = ENV.fetch('DB_EXCHANGE')
rk = ENV.fetch('DB_RK')
puts "VERSION #{Bunny::VERSION}"

conn = Bunny.new(ENV.fetch('DB_URI'))
conn.start
ch = conn.create_channel
ch.confirm_select

if ENV['DB_MODE'] == 'x-delayed-message'
  # run_client.SHIM_TYPES: type, routing key, binding of .q, of .decoy (a Hash: headers)
  types = [['direct', 'rk', 'rk', 'other'], ['topic', 'order.eu', '*.eu', '*.us'],
           ['fanout', 'rk', '', nil], ['headers', 'rk', { 'kind' => 'a' }, { 'kind' => 'b' }]]
  cases = [ # case, x-delay, the plugin_compat check it is: kind and value
    ['int', 1500, 'int64:1500'],                 # 'l'
    ['float', 1500.7, 'float64:1500'],           # 'd'
    ['string', '1500', 'string:1500'],
    ['zero', 0, 'zero:0'],
    ['negative', -1000, 'negative-int64:0'],     # 'l'
    ['none', nil, 'missing:0']
  ]
  sent = []
  types.each do |type, key, main, decoy|
    x = ch.exchange("#{ex_name}.#{type}", type: 'x-delayed-message', durable: true,
                                          arguments: { 'x-delayed-type' => type })
    [["#{x.name}.q", main], ["#{x.name}.decoy", decoy]].each do |qname, b|
      next if b.nil?
      q = ch.queue(qname, durable: true)
      if b.is_a?(Hash)
        q.bind(x, arguments: b.merge('x-match' => 'all'))
      else
        q.bind(x, routing_key: b)
      end
    end
    cases.each do |id, delay, expect|
      headers = { 'x-client' => 'bunny', 'kind' => 'a' }
      headers['x-delay'] = delay unless delay.nil?
      mid = "#{type}/#{id}"
      t = (Time.now.to_r * 1000).floor
      x.publish(mid, routing_key: key, message_id: mid, headers: headers)
      sent << "SENT #{mid} #{t} #{expect}"
    end
  end
  abort 'a publish was nacked' unless ch.wait_for_confirms
  puts sent
  conn.close
  exit 0
end
# the bridge declared the ingress exchange (fanout, durable): use it as it is
x = Bunny::Exchange.new(ch, :fanout, ex_name, durable: true, no_declare: true)

def now_ms = (Time.now.to_r * 1000).floor
now = now_ms
due_s = now / 1000 + 3
cases = [
  ['int', { 'x-delay' => 1500 }, 'delay:1500'],                    # 'l'
  ['float', { 'x-delay' => 1500.7 }, 'delay:1500'],                # 'd'
  ['string', { 'x-delay' => '1500' }, 'delay:1500'],
  ['big', { 'x-delay' => 5_000_000_000 }, 'dlx:x-delay above max_delay_ms'],
  ['until-time', { 'x-delay-until' => Time.at(due_s) }, "due:#{due_s * 1000}"], # 'T'
  ['until-iso', { 'x-delay-until' => Time.at(Rational(now + 2500, 1000)).utc.strftime('%Y-%m-%dT%H:%M:%S.%LZ') },
   "due:#{now + 2500}"],
  ['until-ms', { 'x-delay-until' => now + 2000 }, "due:#{now + 2000}"],
  ['negative', { 'x-delay' => -1 }, 'now'],
  ['bad', { 'x-delay' => 'soon' }, 'dlx:invalid x-delay']
]
sent = []
cases.each do |id, headers, expect|
  t = now_ms
  x.publish(id, routing_key: rk, message_id: id, mandatory: true,
                headers: headers.merge('x-client' => 'bunny'))
  sent << "SENT #{id} #{t} #{expect}"
end
abort 'a publish was nacked' unless ch.wait_for_confirms
puts sent
conn.close
